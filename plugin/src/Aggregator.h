#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>

#include "attnscope/core/Config.h"
#include "attnscope/core/Topology.h"

namespace c10d {
class Store;
}

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

// Where the gloo group's store comes from.
struct StoreSource {
  c10::intrusive_ptr<c10d::Store> store;  // handed in by the program (c10d-aware); may be null
};

// Builds the configured backend; blocks until the group is formed or the timeout passes.
// Returns null with `error` set when it cannot (the reporter then stays per-rank only).
std::unique_ptr<Aggregator> createAggregator(Aggregation aggregation, const Topology& topology,
                                             const StoreSource& source,
                                             std::chrono::milliseconds timeout, int storePort,
                                             std::string* error);

// True when this build has the backend (nccl needs a CUDA LibTorch, mpi needs MPI, gloo needs
// Gloo's headers).
bool aggregationAvailable(Aggregation aggregation);
// The start-up error for a backend this build lacks, naming the variable and what is allowed.
std::string aggregationUnavailableMessage(Aggregation aggregation);

}  // namespace detail
}  // namespace attnscope
