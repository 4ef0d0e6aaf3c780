#pragma once

// Fakes of the reporter's aggregation side for tests/unit/ReporterTest.cpp (c10d's
// FakeProcessGroup is the model): a FakeGroup plays the other ranks of the job (their windows come
// from a script, the Nth collective fails, a collective can be held until released), a
// FakeKeyValueStore plays the job's store (heartbeats the test dates an hour ahead or behind make a
// peer alive or dead with no timing margin), and FakeAggregator is the Aggregator the reporter owns
// on top of them. No LibTorch.

#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attnscope/core/RankWindow.h"
#include "attnscope/reporter/Aggregator.h"
#include "attnscope/reporter/KeyValueStore.h"

namespace attnscope {
namespace detail {

class FakeKeyValueStore final : public KeyValueStore {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++sets_[key];
    if (frozen_.count(key) == 0) values_[key] = value;
  }
  std::string get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return values_.at(key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = values_.find(key);
    const int64_t sum = (it == values_.end() ? 0 : std::stoll(it->second)) + delta;
    values_[key] = std::to_string(sum);
    return sum;
  }
  bool check(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return values_.count(key) > 0;
  }
  void deleteKey(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_.erase(key);
  }

  // The test's side: a peer's key, which the reporter's own sets then leave alone.
  void setPeerKey(const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    frozen_[key] = true;
    values_[key] = value;
  }
  int sets(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    return sets_[key];
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> frozen_;
  std::map<std::string, int> sets_;
};

// The rest of the job, as the FakeAggregator sees it. Collectives are counted together in call
// order; the window all-gathers (RankWindow-sized vectors), which scripts refer to, apart (0, 1,
// ...).
class FakeGroup {
 public:
  FakeGroup(int rank, int worldSize) : rank_(rank), worldSize_(worldSize) {}

  // Rank `r`'s window for this rank's window all-gather number `round` (from 0), given this
  // rank's; by default a copy of this rank's.
  std::function<RankWindow(const RankWindow& mine, int r, int round)> peerWindow;
  int failAtWindowGather = -1;  // this window all-gather fails (the backend turns unhealthy)
  int holdAtWindowGather = -1;  // this window all-gather waits for release() first
  std::string failure = "fake: connection closed by peer";
  std::shared_ptr<FakeKeyValueStore> store;  // null: a backend without one (as MPI)

  int rank() const { return rank_; }
  int worldSize() const { return worldSize_; }
  int collectives() {
    std::lock_guard<std::mutex> lock(mutex_);
    return collectives_;
  }
  int windowGathers() {
    std::lock_guard<std::mutex> lock(mutex_);
    return windowGathers_;
  }
  int reduces() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reduces_;
  }
  bool holding() {
    std::lock_guard<std::mutex> lock(mutex_);
    return holding_;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = true;
    }
    wake_.notify_all();
  }

  // One collective: false with `error` set when scripted to fail.
  bool enter(bool* windowGather, int* round, bool gather, size_t size, std::string* error) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++collectives_;
    *windowGather = gather && size == RankWindow::kVectorSize;
    *round = *windowGather ? windowGathers_++ : -1;
    if (!gather) ++reduces_;
    if (*windowGather && *round == holdAtWindowGather) {
      holding_ = true;
      wake_.wait(lock, [this] { return released_; });
      holding_ = false;
    }
    if (*windowGather && *round == failAtWindowGather) {
      *error = failure;
      return false;
    }
    return true;
  }

 private:
  const int rank_;
  const int worldSize_;
  std::mutex mutex_;
  std::condition_variable wake_;
  int collectives_ = 0;
  int windowGathers_ = 0;
  int reduces_ = 0;
  bool holding_ = false;
  bool released_ = false;
};

class FakeAggregator final : public Aggregator {
 public:
  explicit FakeAggregator(std::shared_ptr<FakeGroup> group) : group_(std::move(group)) {}
  const char* name() const override { return "fake"; }
  bool allGather(const std::vector<double>& mine, std::vector<double>* all,
                 std::string* error) override {
    bool windowGather = false;
    int round = -1;
    if (!healthy_ || !group_->enter(&windowGather, &round, true, mine.size(), error)) {
      healthy_ = false;
      return false;
    }
    all->clear();
    const RankWindow me = windowGather ? RankWindow::fromVector(mine.data()) : RankWindow();
    for (int r = 0; r < group_->worldSize(); ++r) {
      if (r == group_->rank() || !windowGather) {
        all->insert(all->end(), mine.begin(), mine.end());  // other collectives: everyone alike
        continue;
      }
      RankWindow peer = me;
      if (group_->peerWindow) peer = group_->peerWindow(me, r, round);
      peer.rank = r;
      const std::vector<double> v = peer.toVector();
      all->insert(all->end(), v.begin(), v.end());
    }
    return true;
  }
  // Every rank contributed the same: the sum is world × this rank's.
  bool allReduceSum(std::vector<double>* values, std::string* error) override {
    bool windowGather = false;
    int round = -1;
    if (!healthy_ || !group_->enter(&windowGather, &round, false, values->size(), error)) {
      healthy_ = false;
      return false;
    }
    for (double& v : *values) v *= group_->worldSize();
    return true;
  }
  KeyValueStore* store() override { return group_->store.get(); }
  std::string noStoreReason() const override { return "the fake backend has no store"; }

 private:
  std::shared_ptr<FakeGroup> group_;
};

}  // namespace detail
}  // namespace attnscope
