#pragma once

#include <chrono>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "Aggregator.h"

namespace attnscope {
namespace detail {

// A dedicated c10d ProcessGroupGloo formed on the job's store under attnscope's own key prefix:
// it shares the rendezvous, never the training communicator.
class GlooAggregator final : public Aggregator {
 public:
  // Forms the group; blocks until every rank joined. \throw std::exception after `timeout`.
  GlooAggregator(c10::intrusive_ptr<c10d::Store> store, int rank, int worldSize,
                 std::chrono::milliseconds timeout);
  const char* name() const override { return "gloo"; }
  bool allGather(const std::vector<double>& mine, std::vector<double>* all,
                 std::string* error) override;
  bool allReduceSum(std::vector<double>* values, std::string* error) override;
  c10d::Store* store() override { return store_.get(); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  int worldSize_;
  std::chrono::milliseconds timeout_;
};

}  // namespace detail
}  // namespace attnscope
