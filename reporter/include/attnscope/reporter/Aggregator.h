#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/reporter/KeyValueStore.h"

namespace attnscope {
namespace detail {

// The collectives one reporting round needs, on a communicator of attnscope's own (never the
// training job's). Every call is bounded by the round timeout; a call that fails or times out
// returns false with the reason, and the backend reports itself unhealthy from then on.
// Called from the reporter thread only. Torch-free: the backends (AggregatorFactory.h) are the
// plugin's, the reporter sees this interface (a Fake in unit tests).
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
  // The side channel the group was formed on, when there is one: heartbeats, the stop barrier
  // and the degraded rounds (docs/AGGREGATION.md) use it. Lives as long as the aggregator.
  virtual KeyValueStore* store() { return nullptr; }
  // Without a store: why this backend has none, so it cannot go on through one once its
  // collectives fail (said once, when they do).
  virtual std::string noStoreReason() const { return "the backend has no key-value store"; }

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
  std::string noStoreReason() const override { return "a world of one has no peers to wait for"; }
};

// Builds the aggregation backend on the reporter thread (it may block up to the round timeout);
// null with `error` set when there is none.
using AggregatorFactory = std::function<std::unique_ptr<Aggregator>(std::string* error)>;

}  // namespace detail
}  // namespace attnscope
