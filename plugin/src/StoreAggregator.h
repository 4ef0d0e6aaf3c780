#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>

#include "C10dKeyValueStore.h"
#include "attnscope/reporter/Aggregator.h"

namespace attnscope {
namespace detail {

// Aggregation through the job's c10d store, with rank 0 as the reducer: every rank sets its vector
// under the collective's sequence number, rank 0 waits for all of them, combines them (concatenates
// or sums) and sets the result, which every other rank waits for and reads. Two store round trips
// per rank and collective, about 3W requests at the store host (vectors above 4 MiB travel in
// chunks: TCPStore refuses values above 8 MiB); the bytes through the host grow with the
// world (W x payload in, W x result out: docs/AGGREGATION.md has the cost model and where it stops
// scaling). It needs nothing but the store, so it runs on every LibTorch, the pip wheel's included,
// in C++ programs that have no process group to hand in. A rank that never writes makes rank 0's
// wait, and so everyone's, time out after the round timeout: the round fails like a collective.
class StoreAggregator final : public Aggregator {
 public:
  // `store` is attnscope's prefixed view of the job's store.
  StoreAggregator(c10::intrusive_ptr<c10d::Store> store, int rank, int worldSize,
                  std::chrono::milliseconds timeout);
  const char* name() const override { return "store"; }
  bool allGather(const std::vector<double>& mine, std::vector<double>* all,
                 std::string* error) override;
  bool allReduceSum(std::vector<double>* values, std::string* error) override;
  KeyValueStore* store() override { return &store_; }

 private:
  enum class Combine { kConcatenate, kSum };
  // One collective: returns the combined vector (W x n doubles for kConcatenate, n for kSum).
  bool exchange(const std::vector<double>& mine, Combine combine, std::vector<double>* out,
                std::string* error);

  C10dKeyValueStore store_;                     // heartbeats and degraded rounds (the reporter's)
  c10::intrusive_ptr<c10d::Store> collective_;  // the exchanges: a connection of their own, so that
                                                // a wait here never holds up a heartbeat
  int rank_;
  int worldSize_;
  std::chrono::milliseconds timeout_;
  uint64_t sequence_ = 0;  // the same on every rank: each calls the collectives in the same order
  size_t previousResultSize_ =
      0;  // doubles in the previous collective's result (rank 0 deletes it)
};

}  // namespace detail
}  // namespace attnscope
