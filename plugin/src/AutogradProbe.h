#pragma once

namespace attnscope {
namespace detail {

// Questions to LibTorch whose headers are heavy, answered in AutogradProbe.cpp alone.

// True while the calling thread executes an autograd graph task (a backward pass), so that an
// attention call made then is an activation-checkpointing recompute.
bool insideBackwardPass();

// True when LibTorch was built with CUDA and a device is present.
bool acceleratorAvailable();

// True while torch.profiler's Kineto profiler runs (it then holds CUPTI).
bool kinetoProfilerRunning();

}  // namespace detail
}  // namespace attnscope
