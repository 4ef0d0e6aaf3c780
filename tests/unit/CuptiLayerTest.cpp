// The real CUPTI activity layer (collectors/src/CuptiActivityApi.cpp) on a fake libcupti.so.13
// (FakeCupti.cpp, linked in, so that the layer opens it as the process's CUPTI): it must hold no
// subscription (PyTorch's Kineto subscribes at a profiler's first trace and, refused, traces
// CPU-only for the rest of the process), give CUPTI back at stop, turn off the records of
// frequent API calls only while it runs, and parse records on the thread that flushes, not in
// CUPTI's callback.
#include <cupti.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "FakeCupti.h"
#include "attnscope/collectors/GpuActivityApi.h"

namespace attnscope {
namespace {

template <typename Record>
std::vector<uint8_t> bytesOf(const Record& r) {
  std::vector<uint8_t> b(sizeof(Record));
  std::memcpy(b.data(), &r, sizeof(Record));
  return b;
}

class CuptiLayerTest : public ::testing::Test {
 protected:
  void SetUp() override { *fakeCupti() = FakeCuptiState(); }
  std::unique_ptr<GpuActivityApi> open() {
    std::string reason;
    auto api = createCuptiActivityApi(&reason);
    EXPECT_NE(api, nullptr) << reason;
    return api;
  }
};

TEST_F(CuptiLayerTest, HoldsNoSubscriptionSoThatKinetoCanSubscribeLater) {
  auto api = open();
  std::string why;
  ASSERT_TRUE(api->start([](const ActivityRecord&) {}, &why)) << why;
  EXPECT_EQ(fakeCupti()->subscribeCalls, 1) << "it probed";
  EXPECT_EQ(fakeCupti()->subscribers, 0) << "and let go at once";
  CUpti_SubscriberHandle kineto = nullptr;
  EXPECT_EQ(cuptiSubscribe(&kineto, nullptr, nullptr), CUPTI_SUCCESS)
      << "torch.profiler's Kineto subscribes while attnscope runs";
  cuptiUnsubscribe(kineto);
  api->stop(false);
}

TEST_F(CuptiLayerTest, AnotherToolsSubscriptionMeansNotStarting) {
  CUpti_SubscriberHandle other = nullptr;
  ASSERT_EQ(cuptiSubscribe(&other, nullptr, nullptr), CUPTI_SUCCESS);
  auto api = open();
  std::string why;
  EXPECT_FALSE(api->start([](const ActivityRecord&) {}, &why));
  EXPECT_EQ(why, "CUPTI is held by another subscriber (torch.profiler/Kineto, DCGM or Nsight)");
  EXPECT_TRUE(fakeCupti()->kinds.empty()) << "nothing enabled";
  cuptiUnsubscribe(other);
}

TEST_F(CuptiLayerTest, ACuptiThatCannotInitialiseIsNamed) {
  fakeCupti()->failInit = true;
  auto api = open();
  std::string why;
  EXPECT_FALSE(api->start([](const ActivityRecord&) {}, &why));
  EXPECT_EQ(why, "CUPTI failed to initialise: CUPTI_ERROR_NOT_INITIALIZED");
}

TEST_F(CuptiLayerTest, StopGivesCuptiBackOrLeavesItToATracingProfiler) {
  for (const bool profiler : {false, true}) {
    SetUp();
    auto api = open();
    std::string why;
    ASSERT_TRUE(api->start([](const ActivityRecord&) {}, &why)) << why;
    EXPECT_TRUE(fakeCupti()->kinds.count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    EXPECT_TRUE(fakeCupti()->kinds.count(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION));
    EXPECT_TRUE(fakeCupti()->quietRuntime.count(CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020))
        << "no record per cudaGetDevice while attnscope runs";
    EXPECT_TRUE(fakeCupti()->quietDriver.count(CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent));
    api->stop(profiler);
    EXPECT_TRUE(fakeCupti()->quietRuntime.empty()) << "a profiler's trace gets them all again";
    EXPECT_TRUE(fakeCupti()->quietDriver.empty());
    EXPECT_EQ(fakeCupti()->kinds.empty(), !profiler)
        << (profiler ? "the tracing profiler's kinds stay" : "nothing of attnscope's stays on");
  }
}

TEST_F(CuptiLayerTest, RecordsAreParsedOnTheFlushingThreadNotInCuptisCallback) {
  auto api = open();
  std::vector<ActivityRecord> got;
  std::vector<std::thread::id> threads;
  std::string why;
  ASSERT_TRUE(api->start(
      [&](const ActivityRecord& r) {
        got.push_back(r);
        threads.push_back(std::this_thread::get_id());
      },
      &why))
      << why;
  CUpti_ActivityExternalCorrelation e{};
  e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  e.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
  e.externalId = 77;
  e.correlationId = 5;
  CUpti_ActivityExternalCorrelation kineto = e;  // Kineto's kind: not attnscope's
  kineto.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  CUpti_ActivityAPI launch{};
  launch.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  launch.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  launch.correlationId = 5;
  launch.threadId = 42;
  CUpti_ActivityAPI host = launch;
  host.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000;
  host.correlationId = 6;
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.correlationId = 5;
  k.start = 1000;
  k.end = 1600;
  k.streamId = 9;
  k.name = "flash_fwd_kernel";
  fakeCupti()->queued = {bytesOf(e), bytesOf(kineto), bytesOf(launch), bytesOf(host), bytesOf(k)};
  api->flush(false);
  ASSERT_EQ(got.size(), 4u) << "Kineto's external ids are not attnscope's";
  for (const std::thread::id& id : threads) EXPECT_EQ(id, std::this_thread::get_id());
  EXPECT_EQ(got[0].kind, ActivityRecord::Kind::kExternalCorrelation);
  EXPECT_EQ(got[0].externalId, 77u);
  EXPECT_EQ(got[1].kind, ActivityRecord::Kind::kApi);
  EXPECT_EQ(got[1].threadId, 42u);
  EXPECT_TRUE(got[1].launchesWork) << "cudaLaunchKernel";
  EXPECT_FALSE(got[2].launchesWork) << "cudaLaunchHostFunc queues no device record";
  EXPECT_EQ(got[3].kind, ActivityRecord::Kind::kKernel);
  EXPECT_EQ(got[3].endNs - got[3].startNs, 600u);
  EXPECT_EQ(got[3].streamId, 9u);
  EXPECT_STREQ(got[3].name, "flash_fwd_kernel");
  EXPECT_EQ(fakeCupti()->bufferBytes, size_t{64} << 10) << "the first buffer: the smallest";
  api->stop(false);
}

}  // namespace
}  // namespace attnscope
