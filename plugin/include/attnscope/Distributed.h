#pragma once

// c10d-aware start: hand attnscope the job's store (and rank) so its aggregation group forms on
// the job's own rendezvous under an "attnscope/" key prefix, instead of a store of its own.
//
//   auto store = c10::make_intrusive<c10d::TCPStore>(addr, opts);   // the job's
//   auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, pgOpts);
//   attnscope::start(attnscope::Config::fromEnvironment(), {store, rank, world});
//
// attnscope never uses the job's process group: it forms its own on the store.

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
};

// \throw std::invalid_argument for a bad configuration or a rank outside [0, worldSize).
ATTNSCOPE_API void start(const Config& config, const DistributedOptions& distributed);

}  // namespace attnscope
