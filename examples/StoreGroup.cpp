#include "StoreGroup.h"

#include <algorithm>
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
  // TCPStore refuses values above 8 MiB: a buffer travels in chunks of at most kChunkBytes.
  constexpr size_t kChunkBytes = 4u << 20;
  const size_t bytes = tensor.numel() * tensor.element_size();
  const size_t chunks = std::max<size_t>(1, (bytes + kChunkBytes - 1) / kChunkBytes);
  const auto key = [&](uint64_t s, int r, size_t c) {
    return prefix_ + std::to_string(s) + "/" + std::to_string(r) + "/" + std::to_string(c);
  };
  const auto* data = static_cast<const uint8_t*>(tensor.data_ptr());
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * kChunkBytes, end = std::min(bytes, begin + kChunkBytes);
    store_->set(key(seq, rank_, c), std::vector<uint8_t>(data + begin, data + end));
  }
  std::vector<std::string> keys;
  for (int r = 0; r < worldSize_; ++r) keys.push_back(key(seq, r, chunks - 1));
  store_->wait(keys);  // every rank sets its last chunk last
  // Every rank set this call's keys after reading all of the previous call's: those are done.
  if (seq >= 1) {
    for (size_t c = 0; c < chunks; ++c) store_->deleteKey(key(seq - 1, rank_, c));
  }
  // Sum (or max) in rank order, so that every rank computes the same bits.
  at::Tensor result;
  for (int r = 0; r < worldSize_; ++r) {
    at::Tensor t = r == rank_ ? tensor.clone() : at::empty_like(tensor);
    if (r != rank_) {
      auto* out = static_cast<uint8_t*>(t.data_ptr());
      size_t offset = 0;
      for (size_t c = 0; c < chunks; ++c) {
        const std::vector<uint8_t> part = store_->get(key(seq, r, c));
        if (offset + part.size() > bytes)
          throw std::runtime_error("rank " + std::to_string(r) + " sent more bytes");
        std::memcpy(out + offset, part.data(), part.size());
        offset += part.size();
      }
      if (offset != bytes)
        throw std::runtime_error("rank " + std::to_string(r) + " sent a different size");
    }
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
