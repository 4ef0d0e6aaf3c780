#include "StoreAggregator.h"

#include <cstring>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace attnscope {
namespace detail {
namespace {

std::vector<uint8_t> toBytes(const double* data, size_t n) {
  std::vector<uint8_t> bytes(n * sizeof(double));
  if (n > 0) std::memcpy(bytes.data(), data, bytes.size());
  return bytes;
}

std::string firstLine(const char* what) {
  std::string s(what);
  return s.substr(0, s.find('\n'));
}

}  // namespace

StoreAggregator::StoreAggregator(c10::intrusive_ptr<c10d::Store> store, int rank, int worldSize,
                                 std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), worldSize_(worldSize), timeout_(timeout) {
  try {
    collective_ = store_->clone();
  } catch (const std::exception&) {
    collective_ = store_;  // a store without clone(): heartbeats wait behind the exchanges
  }
}

bool StoreAggregator::exchange(const std::vector<double>& mine, Combine combine,
                               std::vector<double>* out, std::string* error) {
  const uint64_t seq = sequence_++;
  const std::string base = "agg/" + std::to_string(seq) + "/";
  const std::string result = base + "result";
  try {
    if (rank_ != 0) {
      collective_->set(base + std::to_string(rank_), toBytes(mine.data(), mine.size()));
      collective_->wait({result}, timeout_);
      const std::vector<uint8_t> bytes = collective_->get(result);
      if (bytes.size() % sizeof(double) != 0) throw std::runtime_error("malformed result");
      out->resize(bytes.size() / sizeof(double));
      if (!bytes.empty()) std::memcpy(out->data(), bytes.data(), bytes.size());
      return true;
    }
    std::vector<std::string> keys;
    for (int r = 1; r < worldSize_; ++r) keys.push_back(base + std::to_string(r));
    collective_->wait(keys, timeout_);
    const size_t n = mine.size();
    if (combine == Combine::kConcatenate) {
      out->assign(n * static_cast<size_t>(worldSize_), 0.0);
      std::copy(mine.begin(), mine.end(), out->begin());
    } else {
      *out = mine;
    }
    for (int r = 1; r < worldSize_; ++r) {
      const std::vector<uint8_t> bytes = collective_->get(keys[r - 1]);
      if (bytes.size() != n * sizeof(double)) {
        throw std::runtime_error("rank " + std::to_string(r) + " sent " +
                                 std::to_string(bytes.size()) + " bytes, expected " +
                                 std::to_string(n * sizeof(double)));
      }
      const auto* v = reinterpret_cast<const double*>(bytes.data());
      if (combine == Combine::kConcatenate) {
        std::memcpy(out->data() + static_cast<size_t>(r) * n, v, bytes.size());
      } else {
        for (size_t i = 0; i < n; ++i) (*out)[i] += v[i];
      }
      collective_->deleteKey(keys[r - 1]);
    }
    collective_->set(result, toBytes(out->data(), out->size()));
    // Every rank wrote this collective's input after reading the previous result: it is done.
    if (seq > 0) collective_->deleteKey("agg/" + std::to_string(seq - 1) + "/result");
    return true;
  } catch (const std::exception& e) {
    healthy_ = false;
    *error = std::string("store ") +
             (combine == Combine::kConcatenate ? "all-gather" : "all-reduce") +
             " failed: " + firstLine(e.what());
    return false;
  }
}

bool StoreAggregator::allGather(const std::vector<double>& mine, std::vector<double>* all,
                                std::string* error) {
  return exchange(mine, Combine::kConcatenate, all, error);
}

bool StoreAggregator::allReduceSum(std::vector<double>* values, std::string* error) {
  std::vector<double> sum;
  if (!exchange(*values, Combine::kSum, &sum, error)) return false;
  if (sum.size() != values->size()) {
    healthy_ = false;
    *error = "store all-reduce failed: ranks sent vectors of different sizes";
    return false;
  }
  *values = std::move(sum);
  return true;
}

}  // namespace detail
}  // namespace attnscope
