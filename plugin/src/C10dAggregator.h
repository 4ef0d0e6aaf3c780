#pragma once

#include <chrono>

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include "Aggregator.h"

namespace attnscope {
namespace detail {

// The class ProcessGroupGloo/ProcessGroupNCCL derive from: ProcessGroup in LibTorch 1.x,
// Backend from 2.0 on (same allgather/allreduce signatures).
#if TORCH_VERSION_MAJOR >= 2
using C10dGroup = c10d::Backend;
#else
using C10dGroup = c10d::ProcessGroup;
#endif

// The gloo and nccl backends: a c10d group of attnscope's own, formed on the job's store under
// attnscope's key prefix (the rendezvous is shared, the training communicator never is). The
// buffers live on `device` (the CPU for Gloo, cuda:LOCAL_RANK for NCCL, whose own streams run the
// collectives, so the training stream is never synchronised).
class C10dAggregator final : public Aggregator {
 public:
#if ATTNSCOPE_WITH_GLOO
  // Forms a ProcessGroupGloo; blocks until every rank joined. \throw std::exception after `timeout`.
  static std::unique_ptr<Aggregator> gloo(c10::intrusive_ptr<c10d::Store> store, int rank,
                                          int worldSize, std::chrono::milliseconds timeout);
#endif
#if ATTNSCOPE_WITH_NCCL
  // Forms a ProcessGroupNCCL on cuda:localRank (needs a CUDA LibTorch).
  static std::unique_ptr<Aggregator> nccl(c10::intrusive_ptr<c10d::Store> store, int rank,
                                          int worldSize, int localRank,
                                          std::chrono::milliseconds timeout);
#endif

  C10dAggregator(const char* name, c10::intrusive_ptr<c10d::Store> store,
                 c10::intrusive_ptr<C10dGroup> group, int worldSize, c10::Device device,
                 std::chrono::milliseconds timeout);
  const char* name() const override { return name_; }
  bool allGather(const std::vector<double>& mine, std::vector<double>* all,
                 std::string* error) override;
  bool allReduceSum(std::vector<double>* values, std::string* error) override;
  c10d::Store* store() override { return store_.get(); }

 private:
  const char* name_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<C10dGroup> group_;
  int worldSize_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
};

}  // namespace detail
}  // namespace attnscope
