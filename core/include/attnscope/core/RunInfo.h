#pragma once

#include <cstdint>
#include <string>

namespace attnscope {

// Who produced a set of statistics and over what run; written into every summary.
struct RunInfo {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  std::string node;             // host name
  std::string attnscopeVersion;
  std::string torchVersion;
  int64_t sampleEvery = 1;
  uint64_t stepsSeen = 0;       // steps that ended (step() calls, or backward passes)
  uint64_t stepsSampled = 0;
  bool explicitSteps = false;   // steps marked with step() rather than inferred from backward
  double startUnixSeconds = 0;
  double stopUnixSeconds = 0;
  uint64_t memoryReports = 0;   // allocator reports received
  uint64_t droppedCalls = 0;    // calls of layers beyond ATTNSCOPE_MAX_LAYERS
  double overheadSeconds = 0;   // attnscope's own time on the training threads
};

}  // namespace attnscope
