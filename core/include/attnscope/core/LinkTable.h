#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "attnscope/core/Export.h"
#include "attnscope/core/OpKind.h"

namespace attnscope {

// Where a forward op's autograd node belongs: the attention call, its layer and the op kind.
struct Link {
  uint64_t instance = 0;
  int32_t layer = -1;
  OpKind kind = OpKind::kOther;
  bool modelled =
      false;  // the forward op has a roofline formula: its node's time counts as modelled
};

// Forward→backward links, keyed by (forward thread id, autograd sequence number): forward ops
// inside an attention call record their sequence number; the autograd node that op created
// arrives in backward with the same pair. Sequence numbers grow on each thread, so each thread's
// links form a sorted vector: a call's links are appended in one go at its end, and a lookup is a
// binary search. When several ops share a sequence number (a composite op and the first op
// inside it; an op that created no node and the next one), the last recorded wins: that is the
// op whose node took the number.
// Not thread-safe: the owner serialises access. Cleared at every step boundary.
class ATTNSCOPE_API LinkTable {
 public:
  using Entry = std::pair<int64_t, Link>;  // sequence number, link

  void append(uint64_t forwardThreadId, const Entry* entries, size_t count);
  bool find(uint64_t forwardThreadId, int64_t sequenceNr, Link* out) const;
  void clear();  // keeps capacity
  size_t size() const;

 private:
  struct PerThread {
    uint64_t threadId;
    std::vector<Entry> entries;
  };
  PerThread* thread(uint64_t forwardThreadId);
  const PerThread* thread(uint64_t forwardThreadId) const;
  std::vector<PerThread> threads_;  // few forward threads: a linear scan
};

}  // namespace attnscope
