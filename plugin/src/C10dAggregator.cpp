#include "C10dAggregator.h"

#include <cstdlib>
#include <cstring>

#include <ATen/Functions.h>

namespace attnscope {
namespace detail {
namespace {

// c10::Error texts carry a backtrace after the first line.
std::string firstLine(const char* what) {
  std::string s(what);
  return s.substr(0, s.find('\n'));
}

at::Tensor toTensor(const double* data, int64_t n) {
  // from_blob does not own `data`: a CPU clone.
  return at::from_blob(const_cast<double*>(data), {n}, at::kDouble).clone();
}

void toHost(const at::Tensor& t, double* out) {
  std::memcpy(out, t.data_ptr<double>(), t.numel() * sizeof(double));
}

}  // namespace

std::unique_ptr<Aggregator> C10dAggregator::group(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                  c10::intrusive_ptr<c10d::Store> store,
                                                  std::chrono::milliseconds timeout,
                                                  std::string* error) {
  std::string name = group->getBackendName();
  if (name == "nccl") {
    *error = kNcclRefused;
    return nullptr;
  }
  const int worldSize = group->getSize();
  return std::unique_ptr<Aggregator>(
      new C10dAggregator(std::move(name), std::move(store), std::move(group), worldSize, timeout));
}

C10dAggregator::C10dAggregator(std::string name, c10::intrusive_ptr<c10d::Store> store,
                               c10::intrusive_ptr<c10d::ProcessGroup> group, int worldSize,
                               std::chrono::milliseconds timeout)
    : name_(std::move(name)),
      store_(std::move(store)),
      group_(std::move(group)),
      worldSize_(worldSize),
      timeout_(timeout) {}

bool C10dAggregator::collective(const std::vector<double>& mine, std::vector<double>* out,
                                bool gather, std::string* error) {
  try {
    const auto n = static_cast<int64_t>(mine.size());
    std::vector<at::Tensor> input{toTensor(mine.data(), n)};
    if (!gather) {
      group_->allreduce(input)->wait(timeout_);
      out->resize(mine.size());
      toHost(input[0], out->data());
      return true;
    }
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < worldSize_; ++r) {
      output[0].push_back(at::empty({n}, at::TensorOptions().dtype(at::kDouble)));
    }
    group_->allgather(output, input)->wait(timeout_);
    out->resize(mine.size() * static_cast<size_t>(worldSize_));
    for (int r = 0; r < worldSize_; ++r) toHost(output[0][r], out->data() + r * n);
    return true;
  } catch (const std::exception& e) {
    healthy_ = false;
    *error = name_ + (gather ? " all-gather" : " all-reduce") + " failed: " + firstLine(e.what());
    return false;
  }
}

bool C10dAggregator::allGather(const std::vector<double>& mine, std::vector<double>* all,
                               std::string* error) {
  return collective(mine, all, true, error);
}

bool C10dAggregator::allReduceSum(std::vector<double>* values, std::string* error) {
  std::vector<double> sum;
  const bool ok = collective(*values, &sum, false, error);
  if (ok) *values = std::move(sum);
  return ok;
}

}  // namespace detail
}  // namespace attnscope
