#include "attnscope/core/LinkTable.h"

#include <algorithm>

namespace attnscope {
namespace {

bool bySequence(const LinkTable::Entry& a, const LinkTable::Entry& b) { return a.first < b.first; }

}  // namespace

LinkTable::PerThread* LinkTable::thread(uint64_t forwardThreadId) {
  for (PerThread& t : threads_) {
    if (t.threadId == forwardThreadId) return &t;
  }
  return nullptr;
}

const LinkTable::PerThread* LinkTable::thread(uint64_t forwardThreadId) const {
  for (const PerThread& t : threads_) {
    if (t.threadId == forwardThreadId) return &t;
  }
  return nullptr;
}

void LinkTable::append(uint64_t forwardThreadId, const Entry* entries, size_t count) {
  if (count == 0) return;
  PerThread* t = thread(forwardThreadId);
  if (t == nullptr) {
    threads_.push_back(PerThread{forwardThreadId, {}});
    t = &threads_.back();
  }
  std::vector<Entry>& v = t->entries;
  const size_t oldSize = v.size();
  v.insert(v.end(), entries, entries + count);
  // A call's own links are in order; an enclosing call that ends after a nested one appends
  // numbers from before the nested call's. Merge then, keeping equal numbers in recording order.
  const bool tailSorted = std::is_sorted(v.begin() + oldSize, v.end(), bySequence);
  if (!tailSorted) std::stable_sort(v.begin() + oldSize, v.end(), bySequence);
  if (oldSize > 0 && bySequence(v[oldSize], v[oldSize - 1])) {
    std::inplace_merge(v.begin(), v.begin() + oldSize, v.end(), bySequence);
  }
}

bool LinkTable::find(uint64_t forwardThreadId, int64_t sequenceNr, Link* out) const {
  const PerThread* t = thread(forwardThreadId);
  if (t == nullptr) return false;
  const std::vector<Entry>& v = t->entries;
  // The last entry with this number: just before the first entry above it.
  const auto it = std::upper_bound(v.begin(), v.end(), Entry{sequenceNr, Link{}}, bySequence);
  if (it == v.begin() || std::prev(it)->first != sequenceNr) return false;
  *out = std::prev(it)->second;
  return true;
}

void LinkTable::clear() {
  for (PerThread& t : threads_) t.entries.clear();
}

size_t LinkTable::size() const {
  size_t n = 0;
  for (const PerThread& t : threads_) n += t.entries.size();
  return n;
}

}  // namespace attnscope
