#include "attnscope/exporters/FileSd.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace attnscope {

std::string renderFileSd(const std::vector<ScrapeTarget>& targets, const std::string& job) {
  std::ostringstream out;
  out << "[\n";
  for (size_t i = 0; i < targets.size(); ++i) {
    const ScrapeTarget& t = targets[i];
    out << "  {\"targets\": [\"" << t.host << ":" << t.port << "\"], \"labels\": {\"job\": \""
        << job << "\", \"rank\": \"" << t.rank << "\", \"local_rank\": \"" << t.localRank
        << "\", \"node\": \"" << t.node << "\"}}" << (i + 1 < targets.size() ? "," : "") << "\n";
  }
  out << "]\n";
  return out.str();
}

bool writeFileSd(const std::string& path, const std::vector<ScrapeTarget>& targets,
                 const std::string& job, std::string* error) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << renderFileSd(targets, job);
    if (!out.good()) {
      *error = "cannot write " + tmp;
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot rename " + tmp + " to " + path;
    return false;
  }
  return true;
}

}  // namespace attnscope
