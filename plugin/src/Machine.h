#pragma once

#include "attnscope/core/Config.h"
#include "attnscope/core/RunInfo.h"

namespace attnscope {
namespace detail {

// The machine this rank runs on: CPU model and logical CPUs, LibTorch's intra-op threads, the
// BLAS library loaded in the process, and with an NVIDIA driver the device's name, driver
// version and memory (read through the driver API, which creates no CUDA context).
MachineInfo describeMachine(int localRank);

// The roofline's ceilings (docs/ROOFLINE.md): the configured values, and what is not configured
// measured once per machine when `calibrate` is on (the first rank measures under a file lock and
// caches the result, keyed by CPU, BLAS, LibTorch and threads; the others read it): a float32
// matmul (1024 x 1024, best of 4) for the flop rate and a 64 MiB copy (best of 5) for the
// bandwidth, on the CPU with LibTorch's threads. `deviceTiming`: the op times are GPU times, so
// host measurements would be the wrong roof; then only configured values are used. Never throws: a
// failed measurement is logged and leaves that ceiling unknown.
// `machine`: describeMachine()'s, which keys the cache.
Ceilings machineCeilings(const Config& config, bool deviceTiming, const MachineInfo& machine);

}  // namespace detail
}  // namespace attnscope
