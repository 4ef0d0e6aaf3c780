#include "StoreAggregator.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace attnscope {
namespace detail {
namespace {

// TCPStore refuses values above 8 MiB: a vector travels in chunks of at most this many bytes,
// under "<key>/<chunk>"; its size is known to every rank, so is the number of chunks.
constexpr size_t kChunkBytes = 4u << 20;

size_t chunksFor(size_t bytes) {
  return std::max<size_t>(1, (bytes + kChunkBytes - 1) / kChunkBytes);
}

// The key whose presence says that every chunk of `key` was set (the last one is set last).
std::string lastChunk(const std::string& key, size_t bytes) {
  return key + "/" + std::to_string(chunksFor(bytes) - 1);
}

void setChunked(c10d::Store& store, const std::string& key, const double* data, size_t n) {
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  const size_t bytes = n * sizeof(double);
  for (size_t c = 0, chunks = chunksFor(bytes); c < chunks; ++c) {
    const size_t begin = c * kChunkBytes, end = std::min(bytes, begin + kChunkBytes);
    store.set(key + "/" + std::to_string(c), std::vector<uint8_t>(p + begin, p + end));
  }
}

// Reads n doubles set by setChunked into `out`; deletes the chunks when `erase`.
void getChunked(c10d::Store& store, const std::string& key, size_t n, double* out, bool erase) {
  auto* p = reinterpret_cast<uint8_t*>(out);
  const size_t bytes = n * sizeof(double);
  size_t offset = 0;
  for (size_t c = 0, chunks = chunksFor(bytes); c < chunks; ++c) {
    const std::string k = key + "/" + std::to_string(c);
    const std::vector<uint8_t> part = store.get(k);
    if (offset + part.size() > bytes) throw std::runtime_error(key + ": more bytes than expected");
    if (!part.empty()) std::memcpy(p + offset, part.data(), part.size());
    offset += part.size();
    if (erase) store.deleteKey(k);
  }
  if (offset != bytes) {
    throw std::runtime_error(key + ": " + std::to_string(offset) + " bytes, expected " +
                             std::to_string(bytes));
  }
}

void deleteChunked(c10d::Store& store, const std::string& key, size_t n) {
  for (size_t c = 0, chunks = chunksFor(n * sizeof(double)); c < chunks; ++c) {
    store.deleteKey(key + "/" + std::to_string(c));
  }
}

std::string firstLine(const char* what) {
  std::string s(what);
  return s.substr(0, s.find('\n'));
}

}  // namespace

StoreAggregator::StoreAggregator(c10::intrusive_ptr<c10d::Store> store, int rank, int worldSize,
                                 std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), worldSize_(worldSize), timeout_(timeout) {
  try {
    collective_ = store_.c10dStore()->clone();
  } catch (const std::exception&) {
    collective_ =
        store_.c10dStore();  // a store without clone(): heartbeats wait behind the exchanges
  }
}

bool StoreAggregator::exchange(const std::vector<double>& mine, Combine combine,
                               std::vector<double>* out, std::string* error) {
  const uint64_t seq = sequence_++;
  const std::string base = "agg/" + std::to_string(seq) + "/";
  const std::string result = base + "result";
  const size_t n = mine.size();
  const size_t resultSize =
      combine == Combine::kConcatenate ? n * static_cast<size_t>(worldSize_) : n;
  try {
    if (rank_ != 0) {
      setChunked(*collective_, base + std::to_string(rank_), mine.data(), n);
      collective_->wait({lastChunk(result, resultSize * sizeof(double))}, timeout_);
      out->resize(resultSize);
      getChunked(*collective_, result, resultSize, out->data(), /*erase=*/false);
      return true;
    }
    std::vector<std::string> keys;
    for (int r = 1; r < worldSize_; ++r)
      keys.push_back(lastChunk(base + std::to_string(r), n * sizeof(double)));
    collective_->wait(keys, timeout_);
    out->assign(resultSize, 0.0);
    std::copy(mine.begin(), mine.end(), out->begin());
    std::vector<double> theirs(n);
    for (int r = 1; r < worldSize_; ++r) {
      getChunked(*collective_, base + std::to_string(r), n, theirs.data(), /*erase=*/true);
      if (combine == Combine::kConcatenate) {
        std::copy(theirs.begin(), theirs.end(), out->begin() + static_cast<size_t>(r) * n);
      } else {
        for (size_t i = 0; i < n; ++i) (*out)[i] += theirs[i];
      }
    }
    setChunked(*collective_, result, out->data(), resultSize);
    // Every rank wrote this collective's input after reading the previous result: it is done.
    if (seq > 0)
      deleteChunked(*collective_, "agg/" + std::to_string(seq - 1) + "/result",
                    previousResultSize_);
    previousResultSize_ = resultSize;
    return true;
  } catch (const std::exception& e) {
    healthy_ = false;
    *error = std::string("store ") +
             (combine == Combine::kConcatenate ? "all-gather" : "all-reduce") +
             " failed: " + firstLine(e.what());
    return false;
  }
}

bool StoreAggregator::allGather(const std::vector<double>& mine, std::vector<double>* all,
                                std::string* error) {
  return exchange(mine, Combine::kConcatenate, all, error);
}

bool StoreAggregator::allReduceSum(std::vector<double>* values, std::string* error) {
  std::vector<double> sum;
  if (!exchange(*values, Combine::kSum, &sum, error)) return false;
  if (sum.size() != values->size()) {
    healthy_ = false;
    *error = "store all-reduce failed: ranks sent vectors of different sizes";
    return false;
  }
  *values = std::move(sum);
  return true;
}

}  // namespace detail
}  // namespace attnscope
