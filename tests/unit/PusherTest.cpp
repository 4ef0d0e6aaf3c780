// The push gateway client (exporters/src/Pusher.cpp) against a real TCP server in
// the test: a gateway that accepts, one that refuses with 500, and one that never answers, which
// finish() must leave behind without the thread touching freed memory (also built with
// AddressSanitizer as PusherAsanTest).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <prometheus/client_metric.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "attnscope/exporters/MetricsSnapshot.h"
#include "attnscope/exporters/Pusher.h"

namespace attnscope {
namespace {

// A one-connection-at-a-time HTTP server on 127.0.0.1. kAnswer replies `status` to each request;
// kSilent reads the request and answers nothing until release() closes the connection.
class TestGateway {
 public:
  enum Mode { kAnswer, kSilent };
  TestGateway(Mode mode, int status) : mode_(mode), status_(status) {
    listenFd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    EXPECT_EQ(::bind(listenFd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listenFd_, 8), 0);
    socklen_t len = sizeof a;
    ::getsockname(listenFd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~TestGateway() {
    stop_ = true;
    release();
    thread_.join();
    ::close(listenFd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Closes a connection held by kSilent: the client's request fails.
  void release() { released_ = true; }
  int requests() const { return requests_.load(); }
  bool holding() const { return holding_.load(); }
  std::string lastRequest() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listenFd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listenFd_, nullptr, nullptr);
      if (fd < 0) continue;
      handle(fd);
      ::close(fd);
    }
  }
  void handle(int fd) {
    std::string in;
    char buf[4096];
    size_t need = std::string::npos;  // header end + Content-Length, once known
    while (!stop_ && (need == std::string::npos || in.size() < need)) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      in.append(buf, static_cast<size_t>(n));
      const size_t end = in.find("\r\n\r\n");
      if (end != std::string::npos && need == std::string::npos) {
        size_t length = 0;
        const size_t cl = in.find("Content-Length: ");
        if (cl != std::string::npos && cl < end) length = std::stoul(in.substr(cl + 16));
        need = end + 4 + length;
        if (in.find("Expect: 100-continue") < end) send(fd, "HTTP/1.1 100 Continue\r\n\r\n");
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_ = in;
    }
    ++requests_;
    if (mode_ == kSilent) {
      holding_ = true;
      while (!released_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      holding_ = false;
      return;  // closed without a reply
    }
    send(fd, "HTTP/1.1 " + std::to_string(status_) +
                 " X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  }
  static void send(int fd, const std::string& s) {
    (void)::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
  }

  Mode mode_;
  int status_;
  int listenFd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> released_{false};
  std::atomic<bool> holding_{false};
  std::atomic<int> requests_{0};
  std::mutex mutex_;
  std::string last_;
  std::thread thread_;
};

std::shared_ptr<MetricsSnapshot> snapshotWithOneGauge() {
  prometheus::MetricFamily f;
  f.name = "attnscope_test_value";
  f.help = "a value";
  f.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric m;
  m.gauge.value = 42;
  f.metric.push_back(m);
  auto snapshot = std::make_shared<MetricsSnapshot>();
  snapshot->publish({f});
  return snapshot;
}

// Waits up to `seconds` for pred(); returns its last value.
template <typename Pred>
bool waitFor(double seconds, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!pred() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

TEST(PusherTest, PushesTheSnapshotUnderItsGroupingKey) {
  TestGateway gateway(TestGateway::kAnswer, 200);
  auto snapshot = snapshotWithOneGauge();
  Pusher pusher(gateway.url(), "jobA", "node1-rank3", "", snapshot);
  pusher.finish(30);
  EXPECT_EQ(pusher.pushes(), 1u);
  EXPECT_EQ(pusher.errors(), 0u);
  const std::string request = gateway.lastRequest();
  // prometheus-cpp's Push() sends POST (the gateway replaces the pushed metric names of the group)
  EXPECT_EQ(request.substr(0, request.find("\r\n")),
            "POST /metrics/job/jobA/instance/node1-rank3 HTTP/1.1");
  EXPECT_NE(request.find("attnscope_test_value 42"), std::string::npos) << request;
}

TEST(PusherTest, ARefusedPushIsCountedAsAnError) {
  TestGateway gateway(TestGateway::kAnswer, 500);
  Pusher pusher(gateway.url(), "jobA", "node1-rank0", "", snapshotWithOneGauge());
  pusher.request();
  pusher.finish(30);
  EXPECT_EQ(pusher.pushes(), 0u);
  EXPECT_GE(pusher.errors(), 1u);
  EXPECT_GE(gateway.requests(), 1);
}

// A gateway that never answers: finish() returns after its timeout and leaves the push thread
// behind; the Pusher is destroyed; when the gateway finally drops the connection the thread
// finishes its bookkeeping and releases the state it shares (the snapshot's last other owner).
TEST(PusherTest, AThreadLeftBehindOutlivesThePusherSafely) {
  TestGateway gateway(TestGateway::kSilent, 0);
  auto snapshot = snapshotWithOneGauge();
  {
    Pusher pusher(gateway.url(), "jobA", "node1-rank0", "", snapshot);
    pusher.request();
    ASSERT_TRUE(waitFor(30, [&] { return gateway.holding(); }));
    pusher.finish(0.2);  // the push is stuck: left behind
    EXPECT_EQ(pusher.pushes(), 0u);
  }
  EXPECT_GT(snapshot.use_count(), 1) << "the thread left behind should still hold the state";
  gateway.release();
  EXPECT_TRUE(waitFor(30, [&] { return snapshot.use_count() == 1; }))
      << "the push thread never released its state (use_count " << snapshot.use_count() << ")";
}

}  // namespace
}  // namespace attnscope
