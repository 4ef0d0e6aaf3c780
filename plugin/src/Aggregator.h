#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "attnscope/core/Config.h"
#include "attnscope/core/Topology.h"

namespace attnscope {
namespace detail {

// The collectives one reporting round needs, on a communicator of attnscope's own (never the
// training job's). Every call is bounded by the round timeout; a call that fails or times out
// returns false with the reason, and the backend reports itself unhealthy from then on.
// Called from the reporter thread only.
class Aggregator {
 public:
  virtual ~Aggregator() = default;
  virtual const char* name() const = 0;
  // Gathers `mine` (the same size on every rank) from all ranks, in rank order.
  virtual bool allGather(const std::vector<double>& mine, std::vector<double>* all,
                         std::string* error) = 0;
  // Sums `values` (the same size on every rank) over all ranks, in place.
  virtual bool allReduceSum(std::vector<double>* values, std::string* error) = 0;
  virtual bool healthy() const { return healthy_; }
  // The key-value store the group was formed on, when there is one (heartbeats use it).
  virtual c10d::Store* store() { return nullptr; }

 protected:
  bool healthy_ = true;
};

// A world of one: gathering and reducing are copies.
class LocalAggregator final : public Aggregator {
 public:
  const char* name() const override { return "local"; }
  bool allGather(const std::vector<double>& mine, std::vector<double>* all, std::string*) override {
    *all = mine;
    return true;
  }
  bool allReduceSum(std::vector<double>*, std::string*) override { return true; }
};

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

// True when this build has the backend (nccl needs a CUDA LibTorch, mpi needs MPI).
bool aggregationAvailable(Aggregation aggregation);
// The start-up error for a backend this build lacks, naming the variable and what is allowed.
std::string aggregationUnavailableMessage(Aggregation aggregation);

}  // namespace detail
}  // namespace attnscope
