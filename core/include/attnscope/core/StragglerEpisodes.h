#pragma once

#include <string>
#include <vector>

#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/StragglerDetector.h"

namespace attnscope {

// The attribution of a straggler episode from its windows' votes: the layer most windows named
// and, in it, the cell most named; ties go to the one named last. One window (a rank's short last
// window, or one preempted in another layer) does not move it. Null without votes.
const AttributionVote* leadingVote(const std::vector<AttributionVote>& votes);

// Episodes from the detector's rounds (rank 0): a straggler episode opens (and is logged) at the
// first round a rank is a straggler, is extended while it stays one (its highest score kept, and
// each scored window's attribution counted as a vote for leadingVote), and ends at the first round
// it is not (logged). Hang episodes open and
// extend the same way for ranks hung or missing, and cell outlier episodes for ranks whose
// cellOutlier flag is up (a new cell on the same rank opens a new episode). `names` are the layer
// names by id (attribution).
void updateEpisodes(const ClusterRound& round, const std::vector<std::string>& names,
                    std::vector<DetectorEpisode>* stragglers, std::vector<DetectorEpisode>* hangs,
                    std::vector<DetectorEpisode>* cellOutliers);

}  // namespace attnscope
