#pragma once

#include <chrono>
#include <string>

#include <mpi.h>

#include "attnscope/reporter/Aggregator.h"

namespace attnscope {
namespace detail {

// MPI directly, on a duplicate of MPI_COMM_WORLD so attnscope's traffic never meets the job's.
// If the job has not initialised MPI, the reporter thread does (MPI_THREAD_MULTIPLE requested)
// and finalises it when attnscope stops. If the job initialised MPI below MPI_THREAD_MULTIPLE,
// calling it from the reporter thread is not allowed: construction fails with that reason.
// Collectives are non-blocking and polled up to the timeout; a round that times out is abandoned
// and the backend turns unhealthy (MPI cannot cancel a collective).
class MpiAggregator final : public Aggregator {
 public:
  // \throw std::runtime_error when MPI cannot be used from this thread.
  MpiAggregator(int expectedRank, int expectedWorldSize, std::chrono::milliseconds timeout);
  ~MpiAggregator() override;
  const char* name() const override { return "mpi"; }
  bool allGather(const std::vector<double>& mine, std::vector<double>* all,
                 std::string* error) override;
  bool allReduceSum(std::vector<double>* values, std::string* error) override;
  std::string noStoreReason() const override {
    return "MPI has no key-value store beside its communicator, and a communicator whose "
           "collective failed cannot be used again: each rank keeps its own figures from then on";
  }

 private:
  bool complete(MPI_Request* request, const char* what, std::string* error);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int worldSize_ = 1;
  bool initialisedHere_ = false;
  std::chrono::milliseconds timeout_;
};

}  // namespace detail
}  // namespace attnscope
