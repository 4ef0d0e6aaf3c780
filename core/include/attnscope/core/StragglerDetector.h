#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/core/Attribution.h"
#include "attnscope/core/Export.h"
#include "attnscope/core/RankWindow.h"

namespace attnscope {

struct StragglerOptions {
  double threshold = 1.2;      // ATTNSCOPE_STRAGGLER_THRESHOLD
  int windows = 3;             // ATTNSCOPE_STRAGGLER_WINDOWS
  double exitThreshold = 1.2;  // Config::exitThreshold()
  int exitWindows = 1;         // ATTNSCOPE_STRAGGLER_EXIT_WINDOWS
  double hangSeconds = 300;    // ATTNSCOPE_HANG_S
  // A window with fewer sampled steps (the short last window at stop, a window cut by sampling)
  // is too small to score: it leaves the rank's count as it was.
  int minSampledSteps = 1;
};

// The options Config carries (ATTNSCOPE_STRAGGLER_*, ATTNSCOPE_HANG_S), with windows of fewer
// than 3 sampled steps left unscored: what rank 0's detector runs with.
ATTNSCOPE_API StragglerOptions stragglerOptions(const Config& config);

// The cross-rank picture after one round.
struct RankStatus {
  int32_t rank = -1;
  bool present = false;
  bool missing = false;  // absent for this round (and since missingSinceRound)
  uint64_t missingSinceRound = 0;
  double score = 0;  // attention time per sampled step / median of the other sampled ranks
  // This round's window had minSampledSteps sampled steps: it was scored, and its attribution
  // counts (a window of a step or two, such as a rank's last, names whatever was preempted in it).
  bool scored = false;
  // Not a straggler: consecutive windows with score > threshold. A straggler: windows since
  // it became one (whatever their scores).
  int consecutive = 0;
  int below = 0;           // a straggler's consecutive windows at or below the exit threshold
  bool active = false;     // a straggler, also while absent (straggler needs it present)
  bool straggler = false;  // present and active
  // Cell outliers, with the same hysteresis: flagged once the rank named the same cell in
  // `windows` consecutive windows, kept until it did not name it in `exitWindows` in a row.
  int cellConsecutive = 0;   // not flagged: windows in a row naming the same cell; flagged: since
  int cellMissed = 0;        // flagged: windows in a row not naming the flagged cell
  bool cellActive = false;   // flagged, also while absent
  bool cellOutlier = false;  // present and cellActive
  int32_t cellLayer = -1;    // the flagged cell (kept while flagged), its last factor and share
  Phase cellPhase = Phase::kForward;
  OpKind cellKind = OpKind::kOther;
  double cellFactor = 0, cellShare = 0;
  bool hung = false;          // step counter still while others moved for >= hangSeconds
  double stalledSeconds = 0;  // how long its step counter has not moved
  uint64_t lastStep = 0;
  RankWindow window;  // the last report received from it
};

struct ClusterRound {
  uint64_t round = 0;
  double timeSeconds = 0;  // when the round ran (the caller's clock)
  int presentRanks = 0;
  int expectedRanks = 0;
  double medianAttentionSeconds = 0;  // over all sampled ranks (the scores use the others')
  std::vector<RankStatus> ranks;      // indexed by rank
  std::vector<int32_t> stragglers;
  std::vector<int32_t> hung;
  std::vector<int32_t> missing;
};

// Decides which ranks are slow, hung or missing from the rounds' RankWindows. Plain C++, no
// LibTorch; rank 0 (and every rank that wants to) feeds it each round's gathered windows.
//
// Score of a rank for a window: its attention time per sampled step over the median of the other
// present ranks that sampled at least minSampledSteps steps in the window (the post-run report's
// definition too; 1 when no other rank sampled). A rank becomes a straggler once its
// score exceeded the threshold in `windows` consecutive windows in which it sampled (a window
// at or below the threshold resets the count), and stays one until its score has been at or below
// exitThreshold in `exitWindows` consecutive sampled windows (hysteresis: one dip, or a score
// between the two thresholds, does not split an episode). A window without a sampled step leaves
// the counts as they were. A rank's cell outlier (RankWindow::cell*) is flagged once the rank
// reported the same cell in `windows` consecutive sampled windows.
// Hung: a present rank whose lastStep has not changed for >= hangSeconds while at least one other
// present rank's lastStep changed in that time.
class ATTNSCOPE_API StragglerDetector {
 public:
  StragglerDetector(int worldSize, StragglerOptions options);

  // windows[i] is rank i's report (present=false when it did not answer). nowSeconds: a
  // monotonic clock of the caller. Returns the round's picture (also kept as last()).
  const ClusterRound& update(const std::vector<RankWindow>& windows, double nowSeconds);
  const ClusterRound& last() const { return last_; }

  // "rank 3: 1.42x the other ranks' median attention time for 3 windows; layer 5 backward softmax
  // is 61% of the excess". layerNames resolves topLayer (an empty or short vector prints "layer
  // <id>").
  static std::string describe(const RankStatus& status, const std::vector<std::string>& layerNames);
  // "rank 2: cell outlier layers.1.attn forward softmax, 2.10x the other ranks' time for it (6% of
  // the rank's attention time) for 3 windows".
  static std::string describeCell(const RankStatus& status,
                                  const std::vector<std::string>& layerNames);

  // The cell outlier hysteresis of one rank, for a scored window w: from prev (the rank's status
  // after its previous window, whose `window` is that window) to s. What update applies, and what
  // a rank mirrors on its own windows (CellHold).
  static void advanceCell(const RankWindow& w, const RankStatus& prev, RankStatus* s,
                          const StragglerOptions& options);

 private:
  int worldSize_;
  StragglerOptions options_;
  ClusterRound last_;
  std::vector<double> lastStepChange_;  // per rank: when lastStep last changed (caller's clock)
};

// A rank's own copy of the detector's cell hysteresis, fed the windows the rank reports: whether
// the detector holds a cell as this rank's outlier (named in `windows` scored windows in a row,
// not yet missed in `exitWindows`), and which. The rank judges a held cell at the exit limits
// (CellOutlierLimits::exit), as a straggler is kept until its score falls under the exit
// threshold: a real slowdown whose evidence dips under the entry bar for a few windows stays one
// episode. Rank 0's detector sees the same windows, so both agree on what is held as long as
// every window reaches it.
class ATTNSCOPE_API CellHold {
 public:
  explicit CellHold(const StragglerOptions& options) : options_(options) {}
  // Every window the rank reports (scored or not), after its comparison.
  void observe(const RankWindow& w);
  bool held() const { return status_.cellActive; }
  // The held cell, or the cell named last when none is held (layer -1: none): what the next
  // comparison keeps naming rather than let several slow cells take turns.
  CellOutlierCell keep() const;

 private:
  StragglerOptions options_;
  RankStatus status_;
};

}  // namespace attnscope
