#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/core/Roofline.h"

namespace attnscope {

// The hardware a rank ran on (run metadata; docs/ROOFLINE.md).
struct MachineInfo {
  std::string cpuModel;  // /proc/cpuinfo "model name"
  int cpuCores = 0;      // online logical CPUs
  int threads = 0;       // LibTorch's intra-op threads
  std::string blas;      // the BLAS library loaded in the process ("libopenblas.so.0", ...)
  std::string gpuName;   // with a CUDA device: its name, driver version and memory
  std::string gpuDriver;
  int64_t gpuMemoryBytes = 0;
};

// Who produced a set of statistics and over what run; written into every summary.
// How one attention layer was found: the Python attach's rule, or a program's own marking.
struct LayerOrigin {
  std::string name;    // the layer name, as in the statistics
  std::string rule;    // "class_name", "include", "calls_sdpa", "fast_path", "compiled_region", ...
  std::string source;  // what the rule matched: the module's class ("LlamaAttention")
};

struct RunInfo {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  std::string node;  // host name
  std::string attnscopeVersion;
  std::string torchVersion;
  int64_t sampleEvery = 1;
  uint64_t stepsSeen = 0;  // steps that ended (step() calls, or backward passes)
  uint64_t stepsSampled = 0;
  bool explicitSteps = false;  // steps marked with step() rather than inferred from backward
  double startUnixSeconds = 0;
  double stopUnixSeconds = 0;
  uint64_t memoryReports = 0;  // allocator reports received
  uint64_t droppedCalls = 0;   // calls of layers beyond ATTNSCOPE_MAX_LAYERS
  double overheadSeconds = 0;  // attnscope's own time on the training threads
  // Device timing (docs/GPU.md): the source in use, the one asked for, and why they differ
  // (CUPTI held by another tool, failed to load or went silent; no device).
  std::string gpuTiming = "off";
  std::string gpuTimingRequested = "auto";
  std::string gpuTimingFallback;
  // Roofline (ATTNSCOPE_ROOFLINE): the ceilings, the machine, and the shape capture's counts.
  bool roofline = false;
  Ceilings ceilings;
  MachineInfo machine;
  uint64_t shapeReads = 0;    // top-level ops whose arguments were read (sampled steps only)
  uint64_t shapeChanges = 0;  // of them, with arguments that changed (formulas evaluated)
  // Discovery (docs/DISCOVERY.md): how the layers were found, what attnscope could not see, and
  // whether steps ended with no attention layer seen at all.
  std::vector<LayerOrigin> layerOrigins;
  std::vector<std::string> discoveryNotes;
  uint64_t layersSeen = 0;    // distinct layer names recorded
  bool nothingFound = false;  // kNothingFoundSteps steps ended and no attention call was seen
  // torch.compile: the time spent compiling (Dynamo, AOTAutograd, Inductor; the first calls of
  // compiled code, and a backward graph compiled lazily) and how many compilations, never counted
  // in any layer's call.
  double compileSeconds = 0;
  uint64_t compiles = 0;
  // How backward nodes were observed (docs/ARCHITECTURE.md, "Backward attribution"):
  // "node_hooks", "callback", "node_hooks_and_callback", or "none" before any call with links.
  std::string backwardObservation = "none";
};

}  // namespace attnscope
