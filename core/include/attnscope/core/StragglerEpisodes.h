#pragma once

#include <string>
#include <vector>

#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/StragglerDetector.h"

namespace attnscope {

// Episodes from the detector's rounds (rank 0): a straggler episode opens (and is logged) at the
// first round a rank is a straggler, is extended while it stays one (its highest score and the
// newest attribution kept), and ends at the first round it is not (logged). Hang episodes open and
// extend the same way for ranks hung or missing. `names` are the layer names by id (attribution).
void updateEpisodes(const ClusterRound& round, const std::vector<std::string>& names,
                    std::vector<StragglerFinding>* stragglers,
                    std::vector<StragglerFinding>* hangs);

}  // namespace attnscope
