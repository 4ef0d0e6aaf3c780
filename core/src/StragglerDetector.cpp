#include "attnscope/core/StragglerDetector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

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

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n % 2 == 1) return values[n / 2];
  return 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

bool seen(double lastChange) { return !std::isnan(lastChange); }

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
  w.controlSampleEvery =
      std::max<int64_t>(1, std::min<int64_t>(1000000, toInteger<int64_t>(v[i++])));
  return w;
}

StragglerDetector::StragglerDetector(int worldSize, StragglerOptions options)
    : worldSize_(std::max(worldSize, 0)),
      options_(options),
      lastStepChange_(static_cast<size_t>(std::max(worldSize, 0)),
                      std::numeric_limits<double>::quiet_NaN()) {
  last_.expectedRanks = worldSize_;
  last_.ranks.resize(static_cast<size_t>(worldSize_));
  for (int r = 0; r < worldSize_; ++r) last_.ranks[static_cast<size_t>(r)].rank = r;
}

const ClusterRound& StragglerDetector::update(const std::vector<RankWindow>& windows,
                                              double nowSeconds) {
  const size_t n = static_cast<size_t>(worldSize_);
  const RankWindow absent;
  auto report = [&](size_t r) -> const RankWindow& {
    return r < windows.size() ? windows[r] : absent;
  };
  auto sampled = [&](size_t r) {
    return report(r).present &&
           report(r).sampledSteps >= static_cast<uint32_t>(options_.minSampledSteps);
  };

  ClusterRound next;
  next.round = last_.round + 1;
  next.timeSeconds = nowSeconds;
  next.expectedRanks = worldSize_;

  std::vector<double> attention;
  for (size_t r = 0; r < n; ++r) {
    if (report(r).present) ++next.presentRanks;
    if (sampled(r)) attention.push_back(report(r).attentionSeconds());
  }
  next.medianAttentionSeconds = median(std::move(attention));

  // Step counters first: the hang test compares every rank's last change with the others'.
  for (size_t r = 0; r < n; ++r) {
    const RankWindow& w = report(r);
    if (!w.present) continue;
    if (!seen(lastStepChange_[r]) || w.lastStep != last_.ranks[r].lastStep) {
      lastStepChange_[r] = nowSeconds;
    }
  }

  double latestChange = -std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < n; ++r) {
    if (report(r).present && seen(lastStepChange_[r]))
      latestChange = std::max(latestChange, lastStepChange_[r]);
  }

  next.ranks.resize(n);
  for (size_t r = 0; r < n; ++r) {
    const RankWindow& w = report(r);
    const RankStatus& prev = last_.ranks[r];
    RankStatus& s = next.ranks[r];
    s.rank = static_cast<int32_t>(r);
    s.present = w.present;
    s.window = w.present ? w : prev.window;
    s.lastStep = w.present ? w.lastStep : prev.lastStep;

    s.missing = !w.present;
    s.missingSinceRound = !s.missing ? 0 : (prev.missing ? prev.missingSinceRound : next.round);

    const double med = next.medianAttentionSeconds;
    s.consecutive = prev.consecutive;
    if (sampled(r)) {
      s.score = med > 0 ? w.attentionSeconds() / med : 0;
      s.consecutive = s.score > options_.threshold ? prev.consecutive + 1 : 0;
    }
    s.straggler = s.present && s.consecutive >= options_.windows;

    if (seen(lastStepChange_[r])) s.stalledSeconds = nowSeconds - lastStepChange_[r];
    // Another present rank moved later than this one: the latest change of any present rank is
    // later (comparing with the maximum keeps the round O(N) when the whole job stands still).
    if (w.present && seen(lastStepChange_[r]) && s.stalledSeconds >= options_.hangSeconds) {
      s.hung = latestChange > lastStepChange_[r];
    }

    if (s.straggler) next.stragglers.push_back(s.rank);
    if (s.hung) next.hung.push_back(s.rank);
    if (s.missing) next.missing.push_back(s.rank);
  }

  last_ = std::move(next);
  return last_;
}

std::string StragglerDetector::describe(const RankStatus& status,
                                        const std::vector<std::string>& layerNames) {
  char buf[256];
  const std::string head = "rank " + std::to_string(status.rank) + ": ";
  if (status.missing) {
    return head + "missing since round " + std::to_string(status.missingSinceRound);
  }
  if (status.hung) {
    std::snprintf(buf, sizeof(buf),
                  "step counter stalled at %llu for %.0fs while other ranks advance",
                  static_cast<unsigned long long>(status.lastStep), status.stalledSeconds);
    return head + buf;
  }
  std::snprintf(buf, sizeof(buf), "%.2fx median attention time for %d windows; ", status.score,
                status.consecutive);
  std::string out = head + buf;
  const RankWindow& w = status.window;
  if (w.topLayer < 0) return out + "no attribution yet";
  const size_t layer = static_cast<size_t>(w.topLayer);
  if (layer < layerNames.size() && !layerNames[layer].empty()) {
    out += layerNames[layer];
  } else {
    out += "layer " + std::to_string(w.topLayer);
  }
  out += " ";
  out += phaseName(w.topPhase);
  out += " ";
  out += opKindName(w.topKind);
  out += " is " + std::to_string(std::lround(w.topShare * 100)) + "% of the excess";
  return out;
}

}  // namespace attnscope
