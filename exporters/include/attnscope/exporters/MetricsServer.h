#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace prometheus {
class Gateway;
}  // namespace prometheus

namespace attnscope {

// What rank 0's /control endpoint has been asked for; ranks apply it at the next round.
struct ControlState {
  uint64_t generation = 0;  // bumped by every accepted request
  bool paused = false;
  int64_t sampleEvery = 1;
};

struct MetricsServerOptions {
  std::string bind = "0.0.0.0";
  int port = 9464;
  std::string credentials;   // "user:password" for basic auth; empty: none
  std::string controlToken;  // bearer token for POST /control; empty: no /control
  int64_t sampleEvery = 1;   // the control state's starting sample rate
};

// Figures published by the reporter thread, handed to scrapes and pushes as they are.
class MetricsSnapshot : public prometheus::Collectable {
 public:
  void publish(std::vector<prometheus::MetricFamily> families);
  std::vector<prometheus::MetricFamily> Collect() const override;
  uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const std::vector<prometheus::MetricFamily>> families_;
  mutable std::atomic<uint64_t> scrapes_{0};
};

// One rank's /metrics endpoint: a small HTTP/1.1 server on one thread of its own, serving the
// snapshot in Prometheus text format (prometheus-cpp's serializer), optional basic auth, and on
// rank 0 /control. Not civetweb (prometheus-cpp's Exposer): its threads are created with a fixed
// 100 KiB stack, which pthread_create refuses in processes whose static TLS is larger (LibTorch
// with OpenBLAS and glog already is), so the endpoint would not start inside a training job.
// A port already in use is not fatal: the error is logged and counted, and the server listens on a
// port the kernel picks instead (port() says which; the file_sd file carries it). Connections are
// served one at a time, each bounded by a 2 s socket timeout, so a stuck client cannot hold it.
class MetricsServer {
 public:
  explicit MetricsServer(const MetricsServerOptions& options);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  bool serving() const { return port_ > 0; }
  int port() const { return port_; }
  bool fallback() const { return fallback_; }
  uint64_t errors() const { return errors_.load(); }
  void publish(std::vector<prometheus::MetricFamily> families) {
    snapshot_->publish(std::move(families));
  }
  const std::shared_ptr<MetricsSnapshot>& snapshot() const { return snapshot_; }

  ControlState control() const;
  // Handles one /control request (public for tests). Returns the HTTP status and
  // fills `body`: 401 without the token, 405 for other methods than GET and POST, 400 for a
  // request that is not action=pause|resume or sample_every=N.
  int handleControl(const std::string& method, const std::string& authorization,
                    const std::string& query, std::string* body);

 private:
  bool listen(int port, std::string* error);
  void serve();
  void handle(int fd);

  MetricsServerOptions options_;
  std::shared_ptr<MetricsSnapshot> snapshot_ = std::make_shared<MetricsSnapshot>();
  int listenFd_ = -1;
  int wakeFd_ = -1;  // eventfd: stop() wakes the server thread
  std::thread thread_;
  int port_ = 0;
  bool fallback_ = false;
  std::atomic<uint64_t> errors_{0};
  mutable std::mutex controlMutex_;
  ControlState control_;
};

// Pushes a snapshot to a Prometheus push gateway from a thread of its own, so that a gateway
// that does not answer never blocks the reporter: at most one push is in flight, requests that
// arrive meanwhile are folded into the next one.
class Pusher {
 public:
  // url: http://host:port. Grouping key: job, instance = "<node>-rank<rank>".
  Pusher(const std::string& url, const std::string& job, const std::string& instance,
         const std::string& credentials, std::shared_ptr<MetricsSnapshot> snapshot);
  ~Pusher();
  void request();
  // A last push, waited for at most `timeoutSeconds`; a thread still stuck is left behind. It
  // holds its own share of the state (gateway, snapshot, counters), so it may outlive the Pusher.
  void finish(double timeoutSeconds);
  uint64_t pushes() const;
  uint64_t errors() const;

 private:
  struct State;
  static void run(const std::shared_ptr<State>& state);
  std::shared_ptr<State> state_;
  bool finished_ = false;
  std::thread thread_;
};

// One scrape target of the job.
struct ScrapeTarget {
  int rank = 0;
  int localRank = 0;
  std::string node;
  std::string host;  // what Prometheus connects to
  int port = 0;
};

// Prometheus file_sd JSON: one group per rank with its labels. Written atomically.
std::string renderFileSd(const std::vector<ScrapeTarget>& targets, const std::string& job);
bool writeFileSd(const std::string& path, const std::vector<ScrapeTarget>& targets,
                 const std::string& job, std::string* error);

}  // namespace attnscope
