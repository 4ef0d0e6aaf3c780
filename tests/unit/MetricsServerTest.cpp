// The /metrics endpoint (libmicrohttpd) over real loopback sockets, against clients that misbehave:
// idle connections by the hundred, a body trickled a byte at a time, oversized and malformed
// requests, a client that resets mid-answer, and shutdown with all of them still connected.
// Every deadline below is derived from the server's configured connection timeout.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "attnscope/exporters/MetricsServer.h"

namespace attnscope {
namespace {

using Clock = std::chrono::steady_clock;

// This binary's own TLS is in the static TLS block of every thread: 512 KiB of it stands for a
// training process's (Debian's LibTorch with OpenBLAS and glog had more than civetweb's 100 KiB
// thread stacks could hold; PyTorch 2.13's wheel has 32 KiB).
[[gnu::used]] thread_local char gStaticTls[512 * 1024];

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int connectTo(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool sendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

struct Reply {
  std::string raw;      // everything received
  bool closed = false;  // the server closed (EOF or reset) before the deadline
  bool reset = false;   // ... with a reset
  double seconds = 0;   // until closed, or the deadline
  int status() const { return raw.size() >= 12 ? std::stoi(raw.substr(9, 3)) : 0; }
  std::string body() const {
    const auto split = raw.find("\r\n\r\n");
    return split == std::string::npos ? "" : raw.substr(split + 4);
  }
  bool hasHeader(const std::string& line) const {
    return raw.substr(0, raw.find("\r\n\r\n")).find("\r\n" + line + "\r\n") != std::string::npos;
  }
};

// Reads until the server closes the connection or `deadlineS` passes.
Reply readUntilClosed(int fd, double deadlineS, Clock::time_point start = Clock::now()) {
  Reply r;
  char buffer[65536];
  while (true) {
    const double left = deadlineS - secondsSince(start);
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      r.raw.append(buffer, static_cast<size_t>(n));
      continue;
    }
    r.closed = true;
    r.reset = n < 0;
    break;
  }
  r.seconds = secondsSince(start);
  return r;
}

// One exchange on a fresh connection: sends `request` as is, then reads to the close.
Reply exchange(int port, const std::string& request, double deadlineS) {
  const int fd = connectTo(port);
  if (fd < 0) return {};
  const auto start = Clock::now();
  sendAll(fd, request);
  Reply r = readUntilClosed(fd, deadlineS, start);
  ::close(fd);
  return r;
}

bool stillOpen(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

std::vector<prometheus::MetricFamily> families(int series) {
  prometheus::MetricFamily f{
      "attnscope_test_seconds", "a test gauge", prometheus::MetricType::Gauge, {}};
  for (int i = 0; i < series; ++i) {
    prometheus::ClientMetric m;
    m.label = {{"layer", "layers." + std::to_string(i) + ".attention.self_attention"},
               {"rank", "0"}};
    m.gauge.value = i * 0.001;
    f.metric.push_back(m);
  }
  return {f};
}

MetricsServerOptions options(int timeoutS) {
  MetricsServerOptions o;
  o.bind = "127.0.0.1";
  o.port = 0;
  o.connectionTimeoutS = timeoutS;
  return o;
}

const char kScrape[] = "GET /metrics HTTP/1.0\r\n\r\n";

// Holds `n` connections that send nothing.
struct IdleClients {
  IdleClients(int port, int n) {
    for (int i = 0; i < n; ++i) fds.push_back(connectTo(port));
  }
  ~IdleClients() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  int open() const {
    int n = 0;
    for (int fd : fds) n += fd >= 0 && stillOpen(fd);
    return n;
  }
  std::vector<int> fds;
};

// A POST whose Content-Length promises more than it sends: a byte every `everyS`.
struct SlowBody {
  SlowBody(int port, double everyS) : fd(connectTo(port)) {
    sendAll(fd,
            "POST /control HTTP/1.1\r\nHost: x\r\nContent-Type: "
            "application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n");
    headersSent = Clock::now();
    trickler = std::thread([this, everyS] {
      while (!stop.load()) {
        if (!sendAll(fd, "a")) return;
        std::this_thread::sleep_for(std::chrono::duration<double>(everyS));
      }
    });
  }
  ~SlowBody() {
    stop.store(true);
    trickler.join();
    ::close(fd);
  }
  int fd;
  Clock::time_point headersSent;
  std::atomic<bool> stop{false};
  std::thread trickler;
};

TEST(MetricsServerTest, ScrapesAreServedWhileAHundredIdleClientsAndASlowBodyHold) {
  const int timeoutS = 3;
  MetricsServer server(options(timeoutS));
  ASSERT_TRUE(server.serving());
  server.publish(families(2000));
  IdleClients idle(server.port(), 100);
  SlowBody slow(server.port(), 0.1);
  // Every scrape is answered while all of them are connected, each in a fraction of the
  // connection timeout (the one-connection-at-a-time server took a timeout per idle client).
  const auto start = Clock::now();
  double slowest = 0;
  int scrapes = 0;
  while (secondsSince(start) < timeoutS / 2.0) {
    const Reply r = exchange(server.port(), kScrape, timeoutS);
    ASSERT_EQ(r.status(), 200) << r.raw.substr(0, 200);
    ASSERT_TRUE(r.closed);
    EXPECT_NE(r.body().find("attnscope_test_seconds{"), std::string::npos);
    slowest = std::max(slowest, r.seconds);
    ++scrapes;
  }
  EXPECT_EQ(idle.open(), 100) << "idle connections were dropped before their timeout";
  EXPECT_TRUE(stillOpen(slow.fd));
  EXPECT_LT(slowest, timeoutS / 4.0);
  EXPECT_GE(scrapes, 5);
  std::printf("%d scrapes with 100 idle connections and a slow body open; slowest %.1f ms\n",
              scrapes, slowest * 1000);
}

TEST(MetricsServerTest, ThreadsStartBesideALargeStaticTls) {
  gStaticTls[0] = 1;
  // The condition civetweb failed under holds in this process: a 100 KiB stack is refused.
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 100 * 1024);
  pthread_t thread;
  const int refused = pthread_create(
      &thread, &attr, [](void*) -> void* { return nullptr; }, nullptr);
  if (refused == 0) pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(refused, EINVAL) << "a 100 KiB stack was accepted: this test proves nothing here";
  // libmicrohttpd's threads start (the system's default stack) and serve.
  MetricsServer server(options(2));
  ASSERT_TRUE(server.serving());
  EXPECT_EQ(server.errors(), 0u);
  server.publish(families(10));
  EXPECT_EQ(exchange(server.port(), kScrape, 2).status(), 200);
}

TEST(MetricsServerTest, AnIdleConnectionIsClosedAfterTheTimeout) {
  const int timeoutS = 1;
  MetricsServer server(options(timeoutS));
  const int fd = connectTo(server.port());
  ASSERT_GE(fd, 0);
  const Reply r = readUntilClosed(fd, timeoutS + 2.0);
  ::close(fd);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.raw, "");
  EXPECT_GE(r.seconds, timeoutS * 0.9);
  EXPECT_LE(r.seconds, timeoutS + 1.0);
  std::printf("idle connection closed after %.3f s (timeout %d s)\n", r.seconds, timeoutS);
}

TEST(MetricsServerTest, ABodyStillArrivingAfterTheTimeoutIsCutOff) {
  const int timeoutS = 1;
  MetricsServer server(options(timeoutS));
  SlowBody slow(server.port(), 0.2);  // never idle for a timeout, never complete
  const Reply r = readUntilClosed(slow.fd, timeoutS + 2.0, slow.headersSent);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.raw, "");  // no answer: the connection is closed
  EXPECT_GE(r.seconds, timeoutS * 0.9);
  EXPECT_LE(r.seconds, timeoutS + 1.0);
  EXPECT_EQ(server.control().generation, 0u);
  std::printf("trickled body cut off %.3f s after its headers (timeout %d s)\n", r.seconds,
              timeoutS);
}

TEST(MetricsServerTest, OversizedRequests) {
  const int timeoutS = 2;
  MetricsServerOptions o = options(timeoutS);
  o.controlToken = "tok";
  MetricsServer server(o);
  server.publish(families(10));
  // Headers over 16 KiB: the endpoint's own 413.
  const Reply big =
      exchange(server.port(),
               "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20 * 1024, 'a') +
                   "\r\nConnection: close\r\n\r\n",
               timeoutS + 1.0);
  EXPECT_EQ(big.status(), 413);
  EXPECT_EQ(big.body(), "request headers too large\n");
  // 2 MB of headers: beyond libmicrohttpd's connection memory, its 431, and the connection closed
  // (the client may still be sending: it is written from another thread).
  {
    const int fd = connectTo(server.port());
    const auto start = Clock::now();
    std::thread writer([fd] {
      sendAll(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2 << 20, 'a') +
                      "\r\n\r\n");
    });
    const Reply huge = readUntilClosed(fd, timeoutS + 1.0, start);
    ::shutdown(fd, SHUT_RDWR);
    writer.join();
    ::close(fd);
    EXPECT_EQ(huge.status(), 431) << huge.raw.substr(0, 200);
    EXPECT_TRUE(huge.hasHeader("Connection: close"));
    EXPECT_TRUE(huge.closed);
    EXPECT_LT(huge.seconds, timeoutS);
  }
  EXPECT_EQ(exchange(server.port(), kScrape, timeoutS).status(), 200);
  // A Content-Length over 4 KiB: 413 before the body is sent, and the connection closed.
  const Reply body = exchange(server.port(),
                              "POST /control HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              "tok\r\nContent-Length: 5000\r\n\r\n",
                              timeoutS + 1.0);
  EXPECT_EQ(body.status(), 413);
  EXPECT_EQ(body.body(), "body too large\n");
  EXPECT_TRUE(body.closed);
  EXPECT_LT(body.seconds, timeoutS);
  // A chunked body over 4 KiB: 413 once it has ended.
  std::string chunked =
      "POST /control HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nTransfer-Encoding: "
      "chunked\r\nConnection: close\r\n\r\n";
  for (int i = 0; i < 5; ++i) chunked += "400\r\n" + std::string(1024, 'a') + "\r\n";
  const Reply chunks = exchange(server.port(), chunked + "0\r\n\r\n", timeoutS + 1.0);
  EXPECT_EQ(chunks.status(), 413);
  EXPECT_EQ(chunks.body(), "body too large\n");
  EXPECT_EQ(server.control().generation, 0u);
  EXPECT_EQ(exchange(server.port(), kScrape, timeoutS).status(), 200);
}

TEST(MetricsServerTest, MalformedRequests) {
  const int timeoutS = 1;
  MetricsServerOptions o = options(timeoutS);
  o.controlToken = "tok";
  MetricsServer server(o);
  server.publish(families(10));
  const double deadline = timeoutS + 1.0;
  struct Case {
    const char* what;
    std::string request;
    int status;  // 0: the connection is closed without an answer
  };
  const std::vector<Case> cases = {
      // libmicrohttpd's answers: the request never reaches the endpoint.
      {"no target", "GET  HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"HTTP/0.9", "GET /metrics\r\n\r\n", 400},
      {"HTTP/2 on HTTP/1", "GET /metrics HTTP/2.0\r\n\r\n", 505},
      {"Content-Length not a number",
       "POST /control HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\nabc", 400},
      {"negative Content-Length",
       "POST /control HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\nabc", 400},
      {"garbage request line", "HELLO\r\n\r\n", 0},
      {"binary request line", std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11), 0},
      // Lying Content-Length: three bytes of fifty, then nothing: closed at the timeout.
      {"lying Content-Length",
       "POST /control HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: "
       "50\r\n\r\nabc",
       0},
      // The endpoint's answers.
      {"wrong method", "BREW /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405},
      {"path outside", "GET /../etc/passwd HTTP/1.0\r\n\r\n", 404},
      {"escaped path outside", "GET /%2e%2e/%2e%2e/etc/passwd HTTP/1.0\r\n\r\n", 404},
      {"no token", "POST /control?action=pause HTTP/1.0\r\n\r\n", 401},
      {"bad value",
       "POST /control HTTP/1.0\r\nAuthorization: Bearer tok\r\nContent-Length: 14\r\n\r\n"
       "sample_every=0",
       400},
      {"wrong method on /control", "PUT /control HTTP/1.0\r\nAuthorization: Bearer tok\r\n\r\n",
       405},
  };
  for (const Case& c : cases) {
    const Reply r = exchange(server.port(), c.request, deadline);
    EXPECT_TRUE(r.closed) << c.what;
    EXPECT_EQ(r.status(), c.status) << c.what << ": " << r.raw.substr(0, 200);
    if (c.status == 0) {
      EXPECT_EQ(r.raw, "") << c.what;
    }
  }
  EXPECT_EQ(server.control().generation, 0u);
  // After all of them, scrapes still work.
  EXPECT_EQ(exchange(server.port(), kScrape, deadline).status(), 200);
}

TEST(MetricsServerTest, ExactHeadersOfTheAnswers) {
  MetricsServerOptions o = options(2);
  o.controlToken = "tok";
  o.credentials = "prom:s3cret";
  MetricsServer server(o);
  server.publish(families(10));
  const Reply basic = exchange(server.port(), kScrape, 3);
  EXPECT_EQ(basic.status(), 401);
  EXPECT_TRUE(basic.hasHeader("WWW-Authenticate: Basic realm=\"attnscope\"")) << basic.raw;
  EXPECT_TRUE(basic.hasHeader("Content-Type: text/plain"));
  const Reply bearer = exchange(server.port(), "GET /control HTTP/1.0\r\n\r\n", 3);
  EXPECT_EQ(bearer.status(), 401);
  EXPECT_TRUE(bearer.hasHeader("WWW-Authenticate: Bearer realm=\"attnscope\"")) << bearer.raw;
  EXPECT_TRUE(bearer.hasHeader("Content-Type: application/json"));
  const std::string auth = "Authorization: Basic cHJvbTpzM2NyZXQ=\r\n";
  const Reply head = exchange(server.port(), "HEAD /metrics HTTP/1.0\r\n" + auth + "\r\n", 3);
  EXPECT_EQ(head.status(), 200);
  EXPECT_TRUE(head.hasHeader("Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  EXPECT_EQ(head.body(), "");
  // The form body of a POST reaches /control.
  const Reply form = exchange(server.port(),
                              "POST /control HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n"
                              "Content-Type: application/x-www-form-urlencoded\r\n"
                              "Content-Length: 12\r\nConnection: close\r\n\r\naction=pause",
                              3);
  EXPECT_EQ(form.status(), 200) << form.raw;
  EXPECT_TRUE(server.control().paused);
}

TEST(MetricsServerTest, KeepAliveServesSeveralScrapesOnOneConnection) {
  MetricsServer server(options(2));
  server.publish(families(10));
  const int fd = connectTo(server.port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sendAll(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string raw;
    char buffer[4096];
    while (raw.find("attnscope_test_seconds{layer=\"layers.9") == std::string::npos) {
      pollfd p{fd, POLLIN, 0};
      ASSERT_EQ(::poll(&p, 1, 2000), 1);
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      ASSERT_GT(n, 0);
      raw.append(buffer, static_cast<size_t>(n));
    }
    EXPECT_EQ(raw.substr(0, 15), "HTTP/1.1 200 OK");
  }
  ::close(fd);
  EXPECT_EQ(server.snapshot()->scrapes(), 3u);
}

TEST(MetricsServerTest, ConnectionsBeyondTheLimitWaitForAFreeSlot) {
  const int timeoutS = 1;
  MetricsServerOptions o = options(timeoutS);
  o.maxConnections = 4;
  MetricsServer server(o);
  server.publish(families(10));
  IdleClients idle(server.port(), 8);  // 4 take the slots, 4 wait in the backlog
  // The scrape waits until idle connections time out and free their slots (the waiting idle
  // ones then take theirs for another timeout): answered within two timeouts.
  const Reply r = exchange(server.port(), kScrape, 3 * timeoutS + 1.0);
  EXPECT_EQ(r.status(), 200);
  EXPECT_GE(r.seconds, timeoutS * 0.9);
  EXPECT_LE(r.seconds, 2 * timeoutS + 1.0);
  std::printf("scrape beyond the connection limit answered after %.3f s (timeout %d s)\n",
              r.seconds, timeoutS);
}

TEST(MetricsServerTest, AClientThatResetsMidAnswerRaisesNoSigpipe) {
  std::signal(SIGPIPE, SIG_DFL);  // a SIGPIPE would end this test binary
  MetricsServer server(options(2));
  server.publish(families(200000));  // tens of MB: the answer outlasts the client
  for (int i = 0; i < 3; ++i) {
    const int fd = connectTo(server.port());
    sendAll(fd, kScrape);
    char c;
    ASSERT_EQ(::recv(fd, &c, 1, 0), 1);
    linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    ::close(fd);  // RST while the server is writing
  }
  EXPECT_EQ(exchange(server.port(), kScrape, 10).status(), 200);
}

TEST(MetricsServerTest, StopIsBoundedWithStuckClients) {
  const int timeoutS = 30;  // stopping must not wait for any of them to time out
  auto server = std::make_unique<MetricsServer>(options(timeoutS));
  server->publish(families(200000));
  const int port = server->port();
  IdleClients idle(port, 50);
  SlowBody slow(port, 0.5);
  const int reader = connectTo(port);  // asks for tens of MB and reads none of it
  sendAll(reader, kScrape);
  char c;
  ASSERT_EQ(::recv(reader, &c, 1, 0), 1);
  const auto start = Clock::now();
  server.reset();
  const double stopS = secondsSince(start);
  EXPECT_LT(stopS, 2.0);
  EXPECT_EQ(idle.open(), 0);
  const Reply rest = readUntilClosed(reader, 2.0);
  EXPECT_TRUE(rest.closed);
  ::close(reader);
  EXPECT_LT(connectTo(port), 0) << "still listening after the destructor";
  std::printf("destructor returned in %.1f ms with 52 stuck clients\n", stopS * 1000);
}

}  // namespace
}  // namespace attnscope
