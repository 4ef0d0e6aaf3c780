// The real CUDA event and CUPTI layers (libcudart and libcupti opened at run time) on whatever
// machine runs the tests. On the CI machines there is a CUDA toolkit but no GPU and no driver:
// the layers must load, and every call must fail softly with a reason (no exception, no crash,
// no hang), which is what lets the plugin run there with device timing off.
#include <unistd.h>

#include <gtest/gtest.h>

#include "attnscope/collectors/GpuActivityApi.h"
#include "attnscope/collectors/GpuEventApi.h"

namespace attnscope {
namespace {

bool gpuDriverPresent() { return ::access("/dev/nvidiactl", F_OK) == 0; }

TEST(CudaLayersTest, EventLayerLoadsTheRuntimeAndCreatesNoEventWithoutADevice) {
  std::string reason;
  std::unique_ptr<GpuEventApi> api = createCudaEventApi(&reason);
  ASSERT_NE(api, nullptr) << reason;
  EXPECT_STREQ(api->name(), "cuda-runtime");
  GpuEventApi::Event e = api->create(0);
  if (!gpuDriverPresent()) {
    EXPECT_EQ(e, nullptr);
  } else if (e != nullptr) {
    EXPECT_EQ(api->query(e, 0), GpuEventApi::Query::kError) << "never recorded";
    api->destroy(e, 0);
  }
}

TEST(CudaLayersTest, ActivityLayerLoadsCuptiAndRefusesToStartWithoutADevice) {
  std::string reason;
  std::unique_ptr<GpuActivityApi> api = createCuptiActivityApi(&reason);
  ASSERT_NE(api, nullptr) << reason;
  EXPECT_STREQ(api->name(), "cupti");
  if (gpuDriverPresent()) GTEST_SKIP() << "a driver is present: starting CUPTI is tests/gpu's job";
  std::string why;
  int records = 0;
  EXPECT_FALSE(api->start([&](const ActivityRecord&) { ++records; }, &why));
  EXPECT_EQ(why.rfind("CUPTI failed to initialise: ", 0), 0u) << why;
  api->flush(true);                      // harmless when not started
  api->stop(/*profilerRunning=*/false);  // harmless too
  EXPECT_EQ(records, 0);
  EXPECT_EQ(api->droppedRecords(), 0u);
}

}  // namespace
}  // namespace attnscope
