#pragma once

#include <chrono>
#include <string>

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "Aggregator.h"
#include "C10dKeyValueStore.h"

namespace attnscope {
namespace detail {

// Aggregation on a c10d group of attnscope's own, never the training job's communicator:
// - a ProcessGroup handed in (Python's attach forms a Gloo side group with
//   torch.distributed.new_group(backend="gloo") right after the job's init_process_group and hands
//   it over through the dispatcher; a C++ program hands in one of its own). Its collectives go
//   through c10d's dispatcher ops to whichever backend the group has, so no backend header (Gloo's
//   are not in the pip wheel) is compiled in here.
// - a ProcessGroupNCCL formed on the job's store (a CUDA LibTorch).
// The buffers live on `device` (the CPU for Gloo, cuda:LOCAL_RANK for NCCL, whose own streams run
// the collectives, so the training stream is never synchronised). `store` carries the heartbeats
// and the degraded rounds.
class C10dAggregator final : public Aggregator {
 public:
  // The handed-in group; its backend names the aggregation ("gloo", ...).
  static std::unique_ptr<Aggregator> group(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                           c10::intrusive_ptr<c10d::Store> store, int localRank,
                                           std::chrono::milliseconds timeout);
#if ATTNSCOPE_WITH_NCCL
  // Forms a ProcessGroupNCCL on cuda:localRank (needs a CUDA LibTorch).
  static std::unique_ptr<Aggregator> nccl(c10::intrusive_ptr<c10d::Store> store, int rank,
                                          int worldSize, int localRank,
                                          std::chrono::milliseconds timeout);
#endif

  const char* name() const override { return name_.c_str(); }
  bool allGather(const std::vector<double>& mine, std::vector<double>* all,
                 std::string* error) override;
  bool allReduceSum(std::vector<double>* values, std::string* error) override;
  KeyValueStore* store() override { return &store_; }

 private:
  C10dAggregator(std::string name, c10::intrusive_ptr<c10d::Store> store,
                 c10::intrusive_ptr<c10d::ProcessGroup> group,
                 c10::intrusive_ptr<c10d::Backend> backend, int worldSize, c10::Device device,
                 std::chrono::milliseconds timeout);
  template <class Group>
  bool collective(Group& group, const std::vector<double>& mine, std::vector<double>* out,
                  bool gather, std::string* error);

  std::string name_;
  C10dKeyValueStore store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;  // one of these two is set
  c10::intrusive_ptr<c10d::Backend> backend_;
  int worldSize_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
};

}  // namespace detail
}  // namespace attnscope
