#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "attnscope/core/Config.h"
#include "attnscope/core/Topology.h"
#include "attnscope/reporter/Aggregator.h"

namespace attnscope {
namespace detail {

// What the program handed in for attnscope's aggregation (both may be null).
struct StoreSource {
  c10::intrusive_ptr<c10d::Store> store;         // the job's store (c10d-aware programs)
  c10::intrusive_ptr<c10d::ProcessGroup> group;  // a side group for attnscope's collectives
};

// Above this many ranks, auto without a group handed in still uses the store, with a warning: the
// store host's traffic grows with the square of the world (docs/AGGREGATION.md).
constexpr int kStoreAggregationWarnRanks = 256;

// Builds the configured backend; blocks until the group is formed or the timeout passes.
// Returns null with `error` set when it cannot (the reporter then stays per-rank only).
std::unique_ptr<Aggregator> createAggregator(Aggregation aggregation, const Topology& topology,
                                             const StoreSource& source,
                                             std::chrono::milliseconds timeout, int storePort,
                                             std::string* error);

// createAggregator for the configured backend and round timeout, as the reporter runs it.
AggregatorFactory aggregatorFactory(const Config& config, const Topology& topology,
                                    StoreSource source);

// True when this build has the backend (mpi needs MPI; nccl is never available: kNcclRefused).
bool aggregationAvailable(Aggregation aggregation);
// The start-up error for a backend this build lacks, naming the variable and what is allowed.
std::string aggregationUnavailableMessage(Aggregation aggregation);

}  // namespace detail
}  // namespace attnscope
