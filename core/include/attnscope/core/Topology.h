#pragma once

#include <map>
#include <string>

#include "attnscope/core/Export.h"

namespace attnscope {

// Where this process sits in the job: from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID), else OpenMPI's
// (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE), else a world of one.
struct ATTNSCOPE_API Topology {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int localWorldSize = 1;
  std::string node;         // host name
  std::string masterAddr;   // empty when unknown
  int masterPort = 0;       // 0 when unknown
  std::string runId;        // TORCHELASTIC_RUN_ID, or "" outside torchrun
  bool agentStore = false;  // torchrun's agent serves the store at MASTER_ADDR:MASTER_PORT
  std::string source;  // "torchrun", "mpirun", "env" (RANK/WORLD_SIZE without torchrun), "single"

  // \throw std::invalid_argument naming the variable, its value and what is allowed (a rank
  // outside [0, world size), a world size below 1, a port outside 1..65535).
  static Topology fromEnvironment();
  static Topology fromVariables(const std::map<std::string, std::string>& vars);
};

}  // namespace attnscope
