#pragma once

#include <string>
#include <vector>

#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/StragglerDetector.h"

namespace attnscope {

// Episodes from the detector's rounds (rank 0): a straggler episode opens (and is logged) at the
// first round a rank is a straggler, is extended while it stays one (its highest score and the
// newest attribution kept), and ends at the first round it is not (logged). Hang episodes open and
// extend the same way for ranks hung or missing, and cell outlier episodes for ranks whose
// cellOutlier flag is up (a new cell on the same rank opens a new episode). `names` are the layer
// names by id (attribution).
void updateEpisodes(const ClusterRound& round, const std::vector<std::string>& names,
                    std::vector<DetectorEpisode>* stragglers, std::vector<DetectorEpisode>* hangs,
                    std::vector<DetectorEpisode>* cellOutliers);

}  // namespace attnscope
