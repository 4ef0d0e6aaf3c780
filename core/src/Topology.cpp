#include "attnscope/core/Topology.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>
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
  if (!t.runId.empty() && t.runId != "none") {
    t.jobScope = t.runId;
  } else if (const std::string* ns = find(vars, "PMIX_NAMESPACE")) {
    t.jobScope = *ns;
  }
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

namespace {

std::string baseName(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The script or module a Python command line runs, or the executable's name.
std::string programName(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0].empty()) return "attnscope";
  const std::string exe = baseName(argv[0]);
  if (exe.rfind("python", 0) != 0) return exe;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-m" && i + 1 < argv.size()) return argv[i + 1];
    if (a == "-c") return exe;
    if (a == "-X" || a == "-W" || a == "--check-hash-based-pycs") {
      ++i;  // the option's value
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;
    std::string script = baseName(a);
    if (script.size() > 3 && script.compare(script.size() - 3, 3, ".py") == 0) {
      script.resize(script.size() - 3);
    }
    return script.empty() ? exe : script;
  }
  return exe;
}

}  // namespace

// What ATTNSCOPE_JOB accepts: letters, digits, '_', '-', '.', at most 128 characters.
std::string labelSafe(std::string s) {
  for (char& c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (!std::isalnum(u) && c != '_' && c != '-' && c != '.') c = '_';
  }
  if (s.size() > 128) s.resize(128);
  return s;
}

std::string defaultJobName(const Topology& t, const std::vector<std::string>& argv) {
  if (!t.runId.empty() && t.runId != "none") return labelSafe(t.runId);
  const std::string program = programName(argv);
  if (!t.masterAddr.empty() && t.masterPort > 0) {
    return labelSafe(program + "-" + t.masterAddr + "-" + std::to_string(t.masterPort));
  }
  if (!t.jobScope.empty()) return labelSafe(program + "-" + t.jobScope);
  return labelSafe(program);
}

std::vector<std::string> processArguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  size_t start = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\0') continue;
    argv.push_back(raw.substr(start, i - start));
    start = i + 1;
  }
  if (start < raw.size()) argv.push_back(raw.substr(start));
  return argv;
}

}  // namespace attnscope
