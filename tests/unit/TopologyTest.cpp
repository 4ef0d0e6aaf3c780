#include "attnscope/core/Topology.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace attnscope {
namespace {

std::string errorOf(const std::map<std::string, std::string>& vars) {
  try {
    Topology::fromVariables(vars);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(TopologyTest, SingleProcessWithoutLauncher) {
  const Topology t = Topology::fromVariables({});
  EXPECT_EQ(t.rank, 0);
  EXPECT_EQ(t.worldSize, 1);
  EXPECT_EQ(t.source, "single");
  EXPECT_FALSE(t.node.empty());
}

TEST(TopologyTest, Torchrun) {
  const Topology t = Topology::fromVariables({{"RANK", "5"},
                                              {"WORLD_SIZE", "8"},
                                              {"LOCAL_RANK", "1"},
                                              {"LOCAL_WORLD_SIZE", "4"},
                                              {"MASTER_ADDR", "10.0.0.1"},
                                              {"MASTER_PORT", "29500"},
                                              {"TORCHELASTIC_RUN_ID", "abc"},
                                              {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(t.rank, 5);
  EXPECT_EQ(t.worldSize, 8);
  EXPECT_EQ(t.localRank, 1);
  EXPECT_EQ(t.localWorldSize, 4);
  EXPECT_EQ(t.masterAddr, "10.0.0.1");
  EXPECT_EQ(t.masterPort, 29500);
  EXPECT_EQ(t.runId, "abc");
  EXPECT_TRUE(t.agentStore);
  EXPECT_EQ(t.source, "torchrun");
}

TEST(TopologyTest, OpenMpi) {
  const Topology t = Topology::fromVariables({{"OMPI_COMM_WORLD_RANK", "2"},
                                              {"OMPI_COMM_WORLD_SIZE", "4"},
                                              {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(t.rank, 2);
  EXPECT_EQ(t.worldSize, 4);
  EXPECT_EQ(t.localRank, 2);
  EXPECT_EQ(t.source, "mpirun");
  EXPECT_FALSE(t.agentStore);
}

TEST(TopologyTest, TorchrunVariablesWinOverMpi) {
  const Topology t = Topology::fromVariables({{"RANK", "1"},
                                              {"WORLD_SIZE", "2"},
                                              {"OMPI_COMM_WORLD_RANK", "0"},
                                              {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(t.rank, 1);
  EXPECT_EQ(t.source, "env");
}

TEST(TopologyTest, BadValuesNameTheVariable) {
  EXPECT_EQ(errorOf({{"RANK", "4"}, {"WORLD_SIZE", "4"}}),
            "RANK=\"4\" is not valid; allowed: an integer from 0 to 3 (WORLD_SIZE is 4)");
  EXPECT_EQ(errorOf({{"RANK", "x"}, {"WORLD_SIZE", "4"}}),
            "RANK=\"x\" is not valid; allowed: an integer from 0 to 3 (WORLD_SIZE is 4)");
  EXPECT_EQ(errorOf({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
            "WORLD_SIZE=\"0\" is not valid; allowed: an integer from 1 to 16777216");
  EXPECT_EQ(
      errorOf({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
      "LOCAL_RANK=\"2\" is not valid; allowed: an integer from 0 to 1");
  EXPECT_EQ(errorOf({{"MASTER_PORT", "70000"}}),
            "MASTER_PORT=\"70000\" is not valid; allowed: an integer from 1 to 65535");
  EXPECT_EQ(errorOf({{"OMPI_COMM_WORLD_RANK", "9"}, {"OMPI_COMM_WORLD_SIZE", "4"}}),
            "OMPI_COMM_WORLD_RANK=\"9\" is not valid; allowed: an integer from 0 to 3 "
            "(OMPI_COMM_WORLD_SIZE is 4)");
}

// torchrun without --rdzv_id sets TORCHELASTIC_RUN_ID=none: the job label must not be "none" for
// every such job, but the same on every rank and readable.
TEST(TopologyTest, DefaultJobNameIsTheProgramAndRendezvousWithoutARunId) {
  const std::map<std::string, std::string> torchrun = {{"RANK", "1"},
                                                       {"WORLD_SIZE", "2"},
                                                       {"MASTER_ADDR", "10.0.0.1"},
                                                       {"MASTER_PORT", "29500"},
                                                       {"TORCHELASTIC_RUN_ID", "none"}};
  const Topology t = Topology::fromVariables(torchrun);
  EXPECT_EQ(defaultJobName(t, {"/venv/bin/python3.11", "-u", "/src/train.py", "--steps", "5"}),
            "train-10.0.0.1-29500");
  EXPECT_EQ(defaultJobName(t, {"python", "-X", "faulthandler", "-m", "pkg.main", "x.py"}),
            "pkg.main-10.0.0.1-29500");
  EXPECT_EQ(defaultJobName(t, {"/build/examples/train_transformer", "--layers", "4"}),
            "train_transformer-10.0.0.1-29500");
  EXPECT_EQ(defaultJobName(t, {}), "attnscope-10.0.0.1-29500");
  // A run id of torchrun's own wins (--rdzv_id, --standalone's uuid).
  std::map<std::string, std::string> named = torchrun;
  named["TORCHELASTIC_RUN_ID"] = "llama-70b-run3";
  EXPECT_EQ(defaultJobName(Topology::fromVariables(named), {"python", "train.py"}),
            "llama-70b-run3");
  // mpirun without a rendezvous address: the PMIx namespace, made label-safe.
  const Topology mpi = Topology::fromVariables({{"OMPI_COMM_WORLD_RANK", "0"},
                                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                                {"PMIX_NAMESPACE", "prterun-host-4242@1"}});
  EXPECT_EQ(defaultJobName(mpi, {"./my trainer"}), "my_trainer-prterun-host-4242_1");
  EXPECT_EQ(defaultJobName(Topology::fromVariables({}), {"./bench"}), "bench");
  // This process: the test binary's own name.
  EXPECT_EQ(defaultJobName(Topology::fromVariables({}), processArguments()), "TopologyTest");
}

}  // namespace
}  // namespace attnscope
