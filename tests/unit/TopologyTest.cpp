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

}  // namespace
}  // namespace attnscope
