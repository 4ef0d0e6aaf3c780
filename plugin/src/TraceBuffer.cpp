#include "TraceBuffer.h"

#include <utility>

namespace attnscope {
namespace detail {

TraceBuffer::TraceBuffer(int64_t startNs) : lastStepNs_(startNs) { calls_.reserve(64); }

void TraceBuffer::add(const CallRecord& record) {
  if (record.layer < 0) return;
  const size_t slot =
      static_cast<size_t>(record.layer) * kNumPhases + static_cast<size_t>(record.phase);
  if (slot >= slots_.size()) slots_.resize(slot + 1, -1);  // once per new layer
  int32_t& index = slots_[slot];
  if (index < 0) {
    index = static_cast<int32_t>(calls_.size());
    calls_.emplace_back();
    calls_.back().layer = record.layer;
    calls_.back().phase = record.phase;
  }
  calls_[index].add(record);
}

void TraceBuffer::endStep(uint64_t step, int64_t nowNs, double unixNow) {
  if (!calls_.empty()) {
    if (bufferedBytes_ > kMaxBufferedBytes) {
      ++dropped_;
    } else {
      EncodedStep s;
      s.step = step;
      s.endUnix = unixNow;
      s.stepNs = nowNs - lastStepNs_;
      s.data.reserve(2 + calls_.size() * 32);
      traceformat::encodeCalls(calls_, &s.data);
      bufferedBytes_ += s.data.size() + sizeof(EncodedStep);
      steps_.push_back(std::move(s));
    }
    for (const TraceCall& c : calls_) {
      slots_[static_cast<size_t>(c.layer) * kNumPhases + static_cast<size_t>(c.phase)] = -1;
    }
    calls_.clear();
  }
  lastStepNs_ = nowNs;
}

std::vector<EncodedStep> TraceBuffer::take(uint64_t* dropped) {
  std::vector<EncodedStep> steps;
  steps.swap(steps_);
  bufferedBytes_ = 0;
  *dropped = dropped_;
  dropped_ = 0;
  return steps;
}

}  // namespace detail
}  // namespace attnscope
