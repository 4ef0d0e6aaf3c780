#include "attnscope/core/Topology.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

extern char** environ;

namespace attnscope {
namespace {

const std::string* find(const std::map<std::string, std::string>& vars, const char* name) {
  const auto it = vars.find(name);
  return it == vars.end() || it->second.empty() ? nullptr : &it->second;
}

int parseInt(const char* name, const std::string& value, long lo, long hi,
             const std::string& allowed) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    throw std::invalid_argument(std::string(name) + "=\"" + value +
                                "\" is not valid; allowed: " + allowed);
  }
  return static_cast<int>(v);
}

std::string hostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

Topology Topology::fromVariables(const std::map<std::string, std::string>& vars) {
  Topology t;
  t.node = hostName();
  const char* rankVar = nullptr;
  const char* worldVar = nullptr;
  const char* localVar = nullptr;
  const char* localWorldVar = nullptr;
  if (find(vars, "RANK") && find(vars, "WORLD_SIZE")) {
    rankVar = "RANK";
    worldVar = "WORLD_SIZE";
    localVar = "LOCAL_RANK";
    localWorldVar = "LOCAL_WORLD_SIZE";
    t.source = find(vars, "TORCHELASTIC_RUN_ID") ? "torchrun" : "env";
  } else if (find(vars, "OMPI_COMM_WORLD_RANK") && find(vars, "OMPI_COMM_WORLD_SIZE")) {
    rankVar = "OMPI_COMM_WORLD_RANK";
    worldVar = "OMPI_COMM_WORLD_SIZE";
    localVar = "OMPI_COMM_WORLD_LOCAL_RANK";
    localWorldVar = "OMPI_COMM_WORLD_LOCAL_SIZE";
    t.source = "mpirun";
  } else {
    t.source = "single";
  }
  if (rankVar != nullptr) {
    t.worldSize =
        parseInt(worldVar, *find(vars, worldVar), 1, 1 << 24, "an integer from 1 to 16777216");
    const std::string rankAllowed = "an integer from 0 to " + std::to_string(t.worldSize - 1) +
                                    " (" + worldVar + " is " + std::to_string(t.worldSize) + ")";
    t.rank = parseInt(rankVar, *find(vars, rankVar), 0, t.worldSize - 1, rankAllowed);
    t.localWorldSize = find(vars, localWorldVar)
                           ? parseInt(localWorldVar, *find(vars, localWorldVar), 1, t.worldSize,
                                      "an integer from 1 to " + std::to_string(t.worldSize))
                           : t.worldSize;  // unknown: at most the whole world on this node
    t.localRank = find(vars, localVar)
                      ? parseInt(localVar, *find(vars, localVar), 0, t.localWorldSize - 1,
                                 "an integer from 0 to " + std::to_string(t.localWorldSize - 1))
                      : 0;
  }
  if (const std::string* a = find(vars, "MASTER_ADDR")) t.masterAddr = *a;
  if (const std::string* p = find(vars, "MASTER_PORT")) {
    t.masterPort = parseInt("MASTER_PORT", *p, 1, 65535, "an integer from 1 to 65535");
  }
  if (const std::string* r = find(vars, "TORCHELASTIC_RUN_ID")) t.runId = *r;
  if (const std::string* s = find(vars, "TORCHELASTIC_USE_AGENT_STORE"))
    t.agentStore = *s == "True";
  return t;
}

Topology Topology::fromEnvironment() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) vars.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return fromVariables(vars);
}

}  // namespace attnscope
