#pragma once

// The state of the fake libcupti.so.13 (FakeCupti.cpp) that CuptiLayerTest links, so that the
// real activity layer opens it as the process's CUPTI.

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

struct FakeCuptiState {
  bool failInit = false;   // cuptiSubscribe fails as CUPTI does where it cannot initialise
  int subscribers = 0;     // subscriptions held now
  int subscribeCalls = 0;  // successful cuptiSubscribe calls
  std::set<int> kinds;     // activity kinds enabled
  std::set<uint32_t> quietRuntime, quietDriver;  // API callback ids whose records are off
  std::vector<std::vector<uint8_t>> queued;      // records the next flush hands back
  size_t bufferBytes = 0;                        // the size of the last buffer asked for
};

extern "C" FakeCuptiState* fakeCupti();
