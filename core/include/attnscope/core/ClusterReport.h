#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/core/StatsTable.h"
#include "attnscope/core/StragglerDetector.h"

namespace attnscope {

// A cell a straggler's windows named as the top of its excess, and how many of them did.
struct AttributionVote {
  int32_t layer = -1;
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
  uint32_t windows = 0;    // the episode's scored windows that named it
  double share = 0;        // its share of the excess in the last of them
  uint64_t lastRound = 0;  // the round of the last of them
};

// An episode of the live detector: from the round a rank became a straggler, hung, or a cell
// outlier to the last round it still was (the ClusterReport keeps each sort in its own list). The
// post-run report builds its StragglerEpisode and CellOutlier from these, with their evidence.
struct DetectorEpisode {
  int32_t rank = -1;
  uint64_t firstRound = 0;
  uint64_t lastRound = 0;
  double maxScore = 0;
  std::string layer;  // attribution, when the rank reported one
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
  double share = 0;
  std::string description;  // the log line
  // Straggler episodes: the cells the rank's scored windows named. The attribution above is the
  // layer most of them named and, in it, its most named cell (leadingVote, StragglerEpisodes.h).
  std::vector<AttributionVote> votes;
};

// What rank 0 knows about the whole job: written into its summary JSON ("cluster" section) and
// handed to exporters after each round.
struct ClusterReport {
  std::string aggregation;  // backend name, or "none"
  bool degraded = false;    // collectives failed; heartbeats through the store since
  uint64_t rounds = 0;
  uint64_t roundErrors = 0;
  std::string lastError;
  bool layersAgree = true;  // ranks registered the same layer names (needed to merge)
  // Cost of the collectives on this rank: wall time of the last round's all-gather + all-reduce,
  // the largest and the mean over the rounds, and the bytes this rank contributed to it.
  double lastRoundSeconds = 0;
  double maxRoundSeconds = 0;
  double sumRoundSeconds = 0;
  uint64_t collectiveRounds = 0;
  uint64_t lastRoundBytes = 0;
  ClusterRound last;  // the last round's picture
  std::vector<DetectorEpisode> stragglers;
  std::vector<DetectorEpisode> hangs;
  // Cell outlier episodes: maxScore is the cell's highest factor, share its excess's share of the
  // rank's attention time.
  std::vector<DetectorEpisode> cellOutliers;
  std::vector<std::string> layerNames;  // by id: what the windows' layer ids name
  StatsTable stats;                     // every rank's windows summed (sampled calls of all ranks)
};

}  // namespace attnscope
