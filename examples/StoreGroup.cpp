#include "StoreGroup.h"

#include <cstring>
#include <stdexcept>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/record_function.h>

namespace examples {

StoreGroup::StoreGroup(c10::intrusive_ptr<c10d::Store> store, std::string prefix, int rank,
                       int worldSize)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), worldSize_(worldSize) {}

void StoreGroup::allReduce(at::Tensor& tensor, Op op) {
  if (!tensor.is_contiguous() || !tensor.device().is_cpu()) {
    throw std::invalid_argument("StoreGroup::allReduce needs a contiguous CPU tensor");
  }
  RECORD_USER_SCOPE("store:all_reduce");
  const uint64_t seq = sequence_++;
  const auto key = [&](uint64_t s, int r) {
    return prefix_ + std::to_string(s) + "/" + std::to_string(r);
  };
  const size_t bytes = tensor.numel() * tensor.element_size();
  const auto* data = static_cast<const uint8_t*>(tensor.data_ptr());
  store_->set(key(seq, rank_), std::vector<uint8_t>(data, data + bytes));
  std::vector<std::string> keys;
  for (int r = 0; r < worldSize_; ++r) keys.push_back(key(seq, r));
  store_->wait(keys);
  // Every rank set this call's key after reading all of the previous call's: that one is done.
  if (seq >= 1) store_->deleteKey(key(seq - 1, rank_));
  // Sum (or max) in rank order, so that every rank computes the same bits.
  at::Tensor result;
  for (int r = 0; r < worldSize_; ++r) {
    std::vector<uint8_t> theirs = r == rank_ ? std::vector<uint8_t>(data, data + bytes) : store_->get(keys[r]);
    if (theirs.size() != bytes) throw std::runtime_error("rank " + std::to_string(r) + " sent a different size");
    at::Tensor t = at::empty_like(tensor);
    std::memcpy(t.data_ptr(), theirs.data(), bytes);
    if (!result.defined()) {
      result = t;
    } else if (op == Op::kSum) {
      result.add_(t);
    } else {
      result = at::maximum(result, t);
    }
  }
  tensor.copy_(result);
}

}  // namespace examples
