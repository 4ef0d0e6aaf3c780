#include "attnscope/core/Roofline.h"

#include <algorithm>

namespace attnscope {

const char* boundName(Bound b) {
  switch (b) {
    case Bound::kMemory:
      return "memory";
    case Bound::kCompute:
      return "compute";
    case Bound::kUnknown:
      break;
  }
  return "unknown";
}

RooflinePoint rooflinePoint(double flops, double bytes, double seconds, const Ceilings& ceilings) {
  RooflinePoint p;
  p.flops = flops;
  p.bytes = bytes;
  p.seconds = seconds;
  if (!(seconds > 0) || (flops <= 0 && bytes <= 0)) return p;
  p.flopsPerSecond = flops / seconds;
  p.bytesPerSecond = bytes / seconds;
  p.intensity = bytes > 0 ? flops / bytes : 0;
  if (!ceilings.known()) return p;
  if (flops <= 0) {  // moves data only: the bandwidth roof is the only one
    p.bound = Bound::kMemory;
    p.fraction = p.bytesPerSecond / ceilings.peakBytesPerSecond;
    return p;
  }
  if (bytes <= 0) {  // computes on nothing it must read (cannot happen for a real op): compute
    p.bound = Bound::kCompute;
    p.attainableFlopsPerSecond = ceilings.peakFlopsPerSecond;
  } else {
    p.bound = p.intensity < ceilings.ridge() ? Bound::kMemory : Bound::kCompute;
    p.attainableFlopsPerSecond =
        std::min(ceilings.peakFlopsPerSecond, p.intensity * ceilings.peakBytesPerSecond);
  }
  p.fraction = p.flopsPerSecond / p.attainableFlopsPerSecond;
  return p;
}

}  // namespace attnscope
