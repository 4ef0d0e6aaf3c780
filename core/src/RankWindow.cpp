#include "attnscope/core/RankWindow.h"

#include <algorithm>
#include <limits>

#include "attnscope/core/Config.h"

namespace attnscope {
namespace {

// Number of RankWindow fields; the vector's last slot is reserved (always 0) so that its layout
// matches kVectorSize.
constexpr size_t kNumFields = 17;
static_assert(kNumFields <= RankWindow::kVectorSize, "RankWindow fields do not fit the vector");

// Conversions from the gathered doubles. The values come from toVector() on another rank, so they
// are in range; clamp anyway so that a corrupt vector cannot cause undefined behaviour.
template <typename T>
T toInteger(double v) {
  if (!(v == v)) return 0;  // NaN
  const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (v <= lo) return std::numeric_limits<T>::lowest();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <typename E>
E toEnum(double v, E fallback) {
  const int i = toInteger<int>(v);
  if (i < 0 || i >= static_cast<int>(E::kCount)) return fallback;
  return static_cast<E>(i);
}

}  // namespace

std::vector<double> RankWindow::toVector() const {
  std::vector<double> v;
  v.reserve(kVectorSize);
  v.push_back(static_cast<double>(rank));
  v.push_back(present ? 1.0 : 0.0);
  v.push_back(static_cast<double>(lastStep));
  v.push_back(static_cast<double>(steps));
  v.push_back(static_cast<double>(sampledSteps));
  v.push_back(windowSeconds);
  v.push_back(forwardSeconds);
  v.push_back(backwardSeconds);
  v.push_back(stepSeconds);
  v.push_back(static_cast<double>(peakBytes));
  v.push_back(collectiveWaitSeconds);
  v.push_back(static_cast<double>(layersChecksum));
  v.push_back(static_cast<double>(numLayers));
  v.push_back(static_cast<double>(topLayer));
  v.push_back(static_cast<double>(static_cast<int>(topPhase)));
  v.push_back(static_cast<double>(static_cast<int>(topKind)));
  v.push_back(topShare);
  v.push_back(static_cast<double>(controlGeneration));
  v.push_back(controlPaused ? 1.0 : 0.0);
  v.push_back(static_cast<double>(controlSampleEvery));
  v.push_back(static_cast<double>(cellLayer));
  v.push_back(static_cast<double>(static_cast<int>(cellPhase)));
  v.push_back(static_cast<double>(static_cast<int>(cellKind)));
  v.push_back(cellFactor);
  v.push_back(cellShare);
  v.resize(kVectorSize, 0.0);
  return v;
}

RankWindow RankWindow::fromVector(const double* v) {
  RankWindow w;
  size_t i = 0;
  w.rank = toInteger<int32_t>(v[i++]);
  w.present = v[i++] != 0;
  w.lastStep = toInteger<uint64_t>(v[i++]);
  w.steps = toInteger<uint32_t>(v[i++]);
  w.sampledSteps = toInteger<uint32_t>(v[i++]);
  w.windowSeconds = v[i++];
  w.forwardSeconds = v[i++];
  w.backwardSeconds = v[i++];
  w.stepSeconds = v[i++];
  w.peakBytes = toInteger<int64_t>(v[i++]);
  w.collectiveWaitSeconds = v[i++];
  w.layersChecksum = toInteger<uint32_t>(v[i++]);
  w.numLayers = toInteger<uint32_t>(v[i++]);
  w.topLayer = toInteger<int32_t>(v[i++]);
  w.topPhase = toEnum<Phase>(v[i++], Phase::kForward);
  w.topKind = toEnum<OpKind>(v[i++], OpKind::kOther);
  w.topShare = v[i++];
  w.controlGeneration = toInteger<uint64_t>(v[i++]);
  w.controlPaused = v[i++] != 0;
  w.controlSampleEvery = std::clamp(toInteger<int64_t>(v[i++]), kMinSampleEvery, kMaxSampleEvery);
  w.cellLayer = toInteger<int32_t>(v[i++]);
  w.cellPhase = toEnum<Phase>(v[i++], Phase::kForward);
  w.cellKind = toEnum<OpKind>(v[i++], OpKind::kOther);
  w.cellFactor = v[i++];
  w.cellShare = v[i++];
  return w;
}

}  // namespace attnscope
