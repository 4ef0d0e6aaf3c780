// The store aggregator on a real c10d TCPStore, ranks as threads of one process: all-gather and
// all-reduce results, vectors above TCPStore's 8 MiB value limit (chunked), keys cleaned up behind
// the collectives, and a rank that never answers (the others fail after the timeout, unhealthy).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "StoreAggregator.h"

namespace attnscope {
namespace detail {
namespace {

using std::chrono::milliseconds;

c10::intrusive_ptr<c10d::Store> server(int world) {
  c10d::TCPStoreOptions o;
  o.port = 0;  // a free port
  o.isServer = true;
  o.numWorkers = world;
  o.waitWorkers = false;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

c10::intrusive_ptr<c10d::Store> client(const c10::intrusive_ptr<c10d::Store>& s) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<c10d::TCPStore&>(*s).getPort();
  o.isServer = false;
  o.waitWorkers = false;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

// Runs body(rank, aggregator) on `world` threads, one StoreAggregator each.
template <class Body>
void ranks(int world, milliseconds timeout, Body body) {
  auto host = server(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      StoreAggregator a(r == 0 ? host : client(host), r, world, timeout);
      body(r, a);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(StoreAggregatorTest, GathersInRankOrderAndSums) {
  constexpr int kWorld = 3;
  std::atomic<int> checked{0};
  ranks(kWorld, milliseconds(20000), [&](int rank, StoreAggregator& a) {
    std::string error;
    for (int round = 0; round < 5; ++round) {  // several rounds: sequence numbers and key reuse
      std::vector<double> all;
      ASSERT_TRUE(a.allGather({double(rank), double(round)}, &all, &error)) << error;
      ASSERT_EQ(all, (std::vector<double>{0, double(round), 1, double(round), 2, double(round)}));
      std::vector<double> v{double(rank + 1), 10.0 * round};
      ASSERT_TRUE(a.allReduceSum(&v, &error)) << error;
      EXPECT_EQ(v, (std::vector<double>{6, 30.0 * round}));
    }
    EXPECT_TRUE(a.healthy());
    ++checked;
  });
  EXPECT_EQ(checked.load(), kWorld);
}

TEST(StoreAggregatorTest, VectorsAboveTheStoresValueLimitTravelInChunks) {
  constexpr int kWorld = 2;
  constexpr size_t kDoubles = 1500000;  // 12 MB: TCPStore refuses values above 8 MiB
  ranks(kWorld, milliseconds(30000), [&](int rank, StoreAggregator& a) {
    std::vector<double> v(kDoubles);
    for (size_t i = 0; i < kDoubles; ++i) v[i] = double(i % 1000) + rank;
    std::string error;
    ASSERT_TRUE(a.allReduceSum(&v, &error)) << error;
    for (size_t i = 0; i < kDoubles; i += 99991) ASSERT_EQ(v[i], 2.0 * double(i % 1000) + 1) << i;
    ASSERT_EQ(v.back(), 2.0 * double((kDoubles - 1) % 1000) + 1);
  });
}

TEST(StoreAggregatorTest, ARankThatNeverAnswersFailsTheOthersAfterTheTimeout) {
  constexpr int kWorld = 3;
  std::atomic<int> failed{0};
  const auto t0 = std::chrono::steady_clock::now();
  ranks(kWorld, milliseconds(500), [&](int rank, StoreAggregator& a) {
    if (rank == 2) return;  // never takes part
    std::vector<double> all;
    std::string error;
    EXPECT_FALSE(a.allGather({1.0}, &all, &error));
    EXPECT_NE(error.find("store all-gather failed"), std::string::npos) << error;
    EXPECT_FALSE(a.healthy());
    ++failed;
  });
  EXPECT_EQ(failed.load(), 2);
  // Rank 0 times out waiting for rank 2, then rank 1 waiting for the result: about two timeouts.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace detail
}  // namespace attnscope
