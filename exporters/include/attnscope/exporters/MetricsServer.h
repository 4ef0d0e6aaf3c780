#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <prometheus/metric_family.h>

#include "attnscope/exporters/ControlState.h"
#include "attnscope/exporters/MetricsSnapshot.h"

namespace attnscope {

struct MetricsServerOptions {
  std::string bind = "0.0.0.0";
  int port = 9464;
  std::string credentials;   // "user:password" for basic auth; empty: none
  std::string controlToken;  // bearer token for POST /control; empty: no /control
  int64_t sampleEvery = 1;   // the control state's starting sample rate
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

}  // namespace attnscope
