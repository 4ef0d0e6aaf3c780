#pragma once

// c10d-aware start: hand attnscope the job's store (and rank) so that its aggregation runs on the
// job's own rendezvous under an "attnscope/" key prefix, instead of a store of its own, and
// optionally a process group of attnscope's own for its collectives.
//
//   auto store = c10::make_intrusive<c10d::TCPStore>(addr, opts);   // the job's
//   attnscope::start(attnscope::Config::fromEnvironment(), {store, rank, world});
//
// With only the store, attnscope aggregates through it (ATTNSCOPE_AGGREGATION=store, what auto
// picks: fine for small worlds, docs/AGGREGATION.md). With `aggregationGroup`, a group made for
// attnscope alone (a Gloo side group, never the one the job trains on; an NCCL group is refused),
// it runs real collectives on it. Python's attach makes that group itself
// (torch.distributed.new_group).

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "attnscope/attnscope.h"

namespace attnscope {

struct DistributedOptions {
  c10::intrusive_ptr<c10d::Store> store;  // null: torchrun's agent store or attnscope's own
  int rank = -1;                          // -1: from processGroup, else the environment
  int worldSize = -1;
  // The job's group, read for its rank and size only: attnscope never sends on it.
  c10::intrusive_ptr<c10d::ProcessGroup> processGroup;
  // A group for attnscope's own collectives (ATTNSCOPE_AGGREGATION=auto or gloo); it must not be
  // the group the job trains on, whose collectives attnscope's would reorder.
  c10::intrusive_ptr<c10d::ProcessGroup> aggregationGroup;
};

// \throw std::invalid_argument for a bad configuration or a rank outside [0, worldSize).
ATTNSCOPE_API void start(const Config& config, const DistributedOptions& distributed);

}  // namespace attnscope
