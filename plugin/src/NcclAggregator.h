#pragma once

#include <chrono>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "Aggregator.h"

namespace attnscope {
namespace detail {

// A dedicated c10d ProcessGroupNCCL formed on the job's store under attnscope's own prefix; the
// buffers live on this rank's device (cuda:LOCAL_RANK) and NCCL runs them on its own streams, so
// the training stream is never synchronised. Built only against a CUDA LibTorch
// (ATTNSCOPE_WITH_NCCL); verified on a GPU by tests/gpu.
class NcclAggregator final : public Aggregator {
 public:
  NcclAggregator(c10::intrusive_ptr<c10d::Store> store, int rank, int worldSize, int localRank,
                 std::chrono::milliseconds timeout);
  const char* name() const override { return "nccl"; }
  bool allGather(const std::vector<double>& mine, std::vector<double>* all,
                 std::string* error) override;
  bool allReduceSum(std::vector<double>* values, std::string* error) override;
  c10d::Store* store() override { return store_.get(); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group_;
  int worldSize_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
};

}  // namespace detail
}  // namespace attnscope
