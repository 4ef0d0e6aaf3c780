#pragma once

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "C10dKeyValueStore.h"
#include "attnscope/reporter/Aggregator.h"

namespace attnscope {
namespace detail {

// Why attnscope has no NCCL aggregation (docs/AGGREGATION.md): a communicator of its own beside
// the job's could deadlock against the job's collectives (NCCL documents that concurrent
// operations on several communicators can), its rounds are not ordered with the job's, and a
// round timeout under TORCH_NCCL_ASYNC_ERROR_HANDLING tears the whole process down.
inline constexpr char kNcclRefused[] =
    "attnscope does not aggregate over NCCL: a communicator of its own beside the job's can "
    "deadlock against the job's collectives, and a round timeout under "
    "TORCH_NCCL_ASYNC_ERROR_HANDLING tears the job down; GPU jobs aggregate over a Gloo side "
    "group (CPU tensors, off the job's streams): torch.distributed.new_group(backend=\"gloo\"), "
    "which Python's attach forms under ATTNSCOPE_AGGREGATION=auto";

// Aggregation on a c10d group of attnscope's own, never the training job's communicator: the
// ProcessGroup handed in (Python's attach forms a Gloo side group with
// torch.distributed.new_group(backend="gloo") right after the job's init_process_group and hands
// it over through the dispatcher; a C++ program hands in one of its own). Its collectives go
// through c10d's dispatcher ops to whichever backend the group has, so no backend header (Gloo's
// are not in the pip wheel) is compiled in here. The buffers are CPU tensors: the training
// streams are never touched. An NCCL group is refused (kNcclRefused). `store` carries the
// heartbeats and the degraded rounds.
class C10dAggregator final : public Aggregator {
 public:
  // The handed-in group; its backend names the aggregation ("gloo", ...). Null with `error` set
  // for an NCCL group.
  static std::unique_ptr<Aggregator> group(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                           c10::intrusive_ptr<c10d::Store> store,
                                           std::chrono::milliseconds timeout, std::string* error);

  const char* name() const override { return name_.c_str(); }
  bool allGather(const std::vector<double>& mine, std::vector<double>* all,
                 std::string* error) override;
  bool allReduceSum(std::vector<double>* values, std::string* error) override;
  KeyValueStore* store() override { return &store_; }

 private:
  C10dAggregator(std::string name, c10::intrusive_ptr<c10d::Store> store,
                 c10::intrusive_ptr<c10d::ProcessGroup> group, int worldSize,
                 std::chrono::milliseconds timeout);
  bool collective(const std::vector<double>& mine, std::vector<double>* out, bool gather,
                  std::string* error);

  std::string name_;
  C10dKeyValueStore store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int worldSize_;
  std::chrono::milliseconds timeout_;
};

}  // namespace detail
}  // namespace attnscope
