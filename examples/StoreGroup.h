#pragma once

// The examples' gradient all-reduce, through the job's c10d store. The pip wheel's LibTorch has
// c10d's Store, TCPStore and (CUDA wheel) ProcessGroupNCCL headers, but no Gloo or MPI process
// group a C++ program could construct (Gloo's headers are not shipped). A C++ program on the wheel
// therefore sums its gradients with NCCL on GPUs, with MPI directly, or, as these small CPU
// examples do, through the store it already has: every rank sets its buffer under the call's
// sequence number and reads everyone's. That is W^2 transfers at the store host per call: fine for
// a few ranks and a small model, not for real training (README, "C++ programs on the pip wheel").

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace examples {

class StoreGroup {
 public:
  enum class Op { kSum, kMax };
  // `store` is the job's (shared by every rank); keys go under "<prefix>".
  StoreGroup(c10::intrusive_ptr<c10d::Store> store, std::string prefix, int rank, int worldSize);
  // Reduces a contiguous float or double CPU tensor over all ranks, in place. The call is titled
  // "store:all_reduce" for profilers (a USER_SCOPE RecordFunction, as c10d's backends do).
  // \throw c10::Error (the store's timeout or a lost connection) when a rank does not take part.
  void allReduce(at::Tensor& tensor, Op op = Op::kSum);
  int worldSize() const { return worldSize_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  int rank_;
  int worldSize_;
  uint64_t sequence_ = 0;
};

}  // namespace examples
