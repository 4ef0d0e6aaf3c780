#pragma once

#include <string>
#include <vector>

namespace attnscope {

// One scrape target of the job.
struct ScrapeTarget {
  int rank = 0;
  int localRank = 0;
  std::string node;
  std::string host;  // what Prometheus connects to
  int port = 0;
};

// Prometheus file_sd JSON: one group per rank with its labels. Written atomically.
std::string renderFileSd(const std::vector<ScrapeTarget>& targets, const std::string& job);
bool writeFileSd(const std::string& path, const std::vector<ScrapeTarget>& targets,
                 const std::string& job, std::string* error);

}  // namespace attnscope
