// The reused CUDA event pool, on the fake event layer.
#include "attnscope/collectors/GpuEventPool.h"

#include <gtest/gtest.h>

#include "FakeGpu.h"

namespace attnscope {
namespace {

using testing_gpu::FakeGpuEventApi;

TEST(GpuEventPoolTest, ReleasedEventsAreReusedInsteadOfCreated) {
  FakeGpuEventApi::State state;
  FakeGpuEventApi api(&state);
  GpuEventPool pool(api, 16);
  for (int step = 0; step < 100; ++step) {
    GpuEventApi::Event a = pool.acquire(0);
    GpuEventApi::Event b = pool.acquire(0);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_NE(a, b);
    pool.release(a, 0);
    pool.release(b, 0);
  }
  EXPECT_EQ(state.created, 2);
  EXPECT_EQ(pool.created(), 2u);
  EXPECT_EQ(pool.idle(), 2u);
}

TEST(GpuEventPoolTest, CapacityBoundsEventsInFlight) {
  FakeGpuEventApi::State state;
  FakeGpuEventApi api(&state);
  GpuEventPool pool(api, 3);
  GpuEventApi::Event e[3];
  for (auto& x : e) x = pool.acquire(0);
  EXPECT_EQ(pool.acquire(0), nullptr);
  pool.release(e[1], 0);
  EXPECT_EQ(pool.acquire(0), e[1]);
  EXPECT_EQ(state.created, 3);
}

TEST(GpuEventPoolTest, EventsStayWithTheirDevice) {
  FakeGpuEventApi::State state;
  FakeGpuEventApi api(&state);
  GpuEventPool pool(api, 8);
  GpuEventApi::Event onZero = pool.acquire(0);
  pool.release(onZero, 0);
  GpuEventApi::Event onOne = pool.acquire(1);
  EXPECT_NE(onOne, onZero);
  EXPECT_EQ(state.created, 2);
  EXPECT_EQ(state.devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(pool.acquire(0), onZero);
}

TEST(GpuEventPoolTest, FailedCreationUsesNoCapacity) {
  FakeGpuEventApi::State state;
  FakeGpuEventApi api(&state);
  GpuEventPool pool(api, 1);
  state.failCreate = true;
  EXPECT_EQ(pool.acquire(0), nullptr);
  EXPECT_EQ(pool.created(), 0u);
  state.failCreate = false;
  EXPECT_NE(pool.acquire(0), nullptr);
}

TEST(GpuEventPoolTest, IdleEventsAreDestroyedWithThePool) {
  FakeGpuEventApi::State state;
  FakeGpuEventApi api(&state);
  {
    GpuEventPool pool(api, 8);
    GpuEventApi::Event a = pool.acquire(2);
    GpuEventApi::Event b = pool.acquire(2);
    pool.release(a, 2);
    pool.release(b, 2);
  }
  EXPECT_EQ(state.destroyed, 2);
}

}  // namespace
}  // namespace attnscope
