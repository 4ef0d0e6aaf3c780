#include "MpiAggregator.h"

#include <stdexcept>
#include <thread>

namespace attnscope {
namespace detail {
namespace {

const char* threadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

}  // namespace

MpiAggregator::MpiAggregator(int expectedRank, int expectedWorldSize,
                             std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  int provided = MPI_THREAD_SINGLE;
  if (initialised) {
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      throw std::runtime_error(
          std::string("the job initialised MPI with ") + threadLevelName(provided) +
          "; attnscope's mpi aggregation runs on its own thread and needs MPI_THREAD_MULTIPLE "
          "(initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...), or let attnscope "
          "initialise it)");
    }
  } else {
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    initialisedHere_ = true;
    // This thread initialised MPI, so even MPI_THREAD_FUNNELED lets it make every call.
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(comm_, &rank);
  MPI_Comm_size(comm_, &worldSize_);
  if (rank != expectedRank || worldSize_ != expectedWorldSize) {
    throw std::runtime_error("MPI says rank " + std::to_string(rank) + " of " +
                             std::to_string(worldSize_) + ", the environment says rank " +
                             std::to_string(expectedRank) + " of " +
                             std::to_string(expectedWorldSize));
  }
}

MpiAggregator::~MpiAggregator() {
  if (comm_ != MPI_COMM_NULL && healthy_) MPI_Comm_free(&comm_);
  int finalised = 0;
  MPI_Finalized(&finalised);
  // An abandoned collective would make MPI_Finalize wait forever: only finalise a healthy run.
  if (initialisedHere_ && !finalised && healthy_) MPI_Finalize();
}

bool MpiAggregator::complete(MPI_Request* request, const char* what, std::string* error) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  int done = 0;
  while (true) {
    if (MPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      healthy_ = false;
      *error = std::string("mpi ") + what + " failed";
      return false;
    }
    if (done) return true;
    if (std::chrono::steady_clock::now() > deadline) {
      healthy_ = false;
      *error = std::string("mpi ") + what + " did not complete within " +
               std::to_string(timeout_.count()) + " ms";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool MpiAggregator::allGather(const std::vector<double>& mine, std::vector<double>* all,
                              std::string* error) {
  all->assign(mine.size() * static_cast<size_t>(worldSize_), 0.0);
  MPI_Request request;
  const int n = static_cast<int>(mine.size());
  if (MPI_Iallgather(mine.data(), n, MPI_DOUBLE, all->data(), n, MPI_DOUBLE, comm_, &request) !=
      MPI_SUCCESS) {
    healthy_ = false;
    *error = "mpi all-gather could not start";
    return false;
  }
  return complete(&request, "all-gather", error);
}

bool MpiAggregator::allReduceSum(std::vector<double>* values, std::string* error) {
  MPI_Request request;
  if (MPI_Iallreduce(MPI_IN_PLACE, values->data(), static_cast<int>(values->size()), MPI_DOUBLE,
                     MPI_SUM, comm_, &request) != MPI_SUCCESS) {
    healthy_ = false;
    *error = "mpi all-reduce could not start";
    return false;
  }
  return complete(&request, "all-reduce", error);
}

}  // namespace detail
}  // namespace attnscope
