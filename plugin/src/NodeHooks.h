#pragma once

#include <cstddef>
#include <cstdint>

#include "attnscope/core/LinkTable.h"

namespace at {
class Tensor;
}

namespace attnscope {
namespace detail {

class Recorder;

// Backward without RecordFunction (docs/ARCHITECTURE.md, "Backward"). A global callback on
// BACKWARD_FUNCTION makes autograd's thread-local restore before every node of the whole
// backward pass dearer, and runs for nodes far from any attention call. Instead, when an attention
// call closes with its results, the autograd nodes its own ops made are found by walking back from
// the results' grad_fn through the nodes whose (forward thread, sequence number) the call linked,
// and each gets a pre-hook and a post-hook that time it (NodeTiming) into the call's backward
// record. Nodes of other work carry nothing. Kept apart from the observer's translation unit for
// autograd's heavy headers.

// Finds the nodes of one call whose `numLinks` links (sorted by sequence number, as the observer
// appends them) were made on `forwardThreadId`, walking back from the results. Returns the number
// found, or -1 when no result has autograd history (no backward will run for the call). `*shapes`
// becomes a hash of every found node's input metadata (the shapes and dtypes of the forward op's
// outputs), in walk order: the roofline's check that a call ran on the shapes its cached costs
// were read for (docs/ROOFLINE.md); 0 when a node's metadata is not plain sizes (nested,
// symbolic) or nothing was found.
int findCallNodes(uint64_t forwardThreadId, const at::Tensor* outputs, size_t count,
                  const LinkTable::Entry* links, size_t numLinks, uint64_t* shapes);

// Hooks the nodes the last findCallNodes on this thread found, each timed under its link in
// `links` (the same array, read now: the caller may have changed the links' modelled bits).
void hookFoundNodes(Recorder* recorder, const LinkTable::Entry* links);

// Unsampled steps while steps are inferred from backward passes: a pre-hook on `output`'s grad_fn
// that tells the recorder a backward pass ran. False when `output` has no grad_fn.
bool hookBackwardSeen(Recorder* recorder, const at::Tensor& output);

}  // namespace detail
}  // namespace attnscope
