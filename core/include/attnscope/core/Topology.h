#pragma once

#include <map>
#include <string>
#include <vector>

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
  std::string node;        // host name
  std::string masterAddr;  // empty when unknown
  int masterPort = 0;      // 0 when unknown
  std::string runId;       // TORCHELASTIC_RUN_ID, or "" outside torchrun
  // What the launcher shares between the ranks of one job besides the rendezvous address:
  // TORCHELASTIC_RUN_ID unless it is torchrun's "none" (no --rdzv_id), else OpenMPI's
  // PMIX_NAMESPACE; empty when neither says.
  std::string jobScope;
  bool agentStore = false;  // torchrun's agent serves the store at MASTER_ADDR:MASTER_PORT
  std::string source;  // "torchrun", "mpirun", "env" (RANK/WORLD_SIZE without torchrun), "single"

  // \throw std::invalid_argument naming the variable, its value and what is allowed (a rank
  // outside [0, world size), a world size below 1, a port outside 1..65535).
  static Topology fromEnvironment();
  static Topology fromVariables(const std::map<std::string, std::string>& vars);
};

// The `job` label when ATTNSCOPE_JOB is not set: the same on every rank of a job, stable across
// its restarts, readable, and different for two jobs on one rendezvous host. The launcher's run id
// when it has one (torchrun --rdzv_id, --standalone's uuid); else "<program>-<MASTER_ADDR>-
// <MASTER_PORT>", "<program>-<PMIX_NAMESPACE>" under mpirun, or "<program>". <program> is the
// script or module a Python interpreter runs (train.py -> train, -m pkg.main -> pkg.main), else
// the executable's name; "attnscope" when argv is empty. Characters ATTNSCOPE_JOB does not accept
// become '_'.
ATTNSCOPE_API std::string defaultJobName(const Topology& topology,
                                         const std::vector<std::string>& argv);
// This process's arguments (/proc/self/cmdline; empty where it cannot be read).
ATTNSCOPE_API std::vector<std::string> processArguments();

}  // namespace attnscope
