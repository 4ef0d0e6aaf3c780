#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/metric_family.h>

#include "attnscope/exporters/ControlState.h"
#include "attnscope/exporters/MetricsSnapshot.h"

struct MHD_Daemon;

namespace attnscope {
namespace detail {
class MetricsEndpoint;
}

struct MetricsServerOptions {
  std::string bind = "0.0.0.0";
  int port = 9464;
  std::string credentials;   // "user:password" for basic auth; empty: none
  std::string controlToken;  // bearer token for POST /control; empty: no /control
  int64_t sampleEvery = 1;   // the control state's starting sample rate
  bool jobControl = true;    // /control takes the job-wide requests (rank 0's endpoint)
  bool layerDetail = false;  // the control state's starting per-layer series (layers=on|off)
  // A connection that sends or reads nothing for this long is closed; a request body must arrive
  // within it (from the end of the headers).
  int connectionTimeoutS = 5;
  int maxConnections = 256;  // beyond it, new connections wait in the listen backlog
  int threads = 2;           // libmicrohttpd's pool: each polls its share of the connections
};

// One rank's /metrics endpoint: libmicrohttpd (Debian's libmicrohttpd12) serving the snapshot in
// Prometheus text format (prometheus-cpp's serializer), optional basic auth, and on rank 0
// /control. What is answered is detail::MetricsEndpoint's (exporters/src/MetricsEndpoint.h), a
// function of the request alone; libmicrohttpd does the connections and the HTTP framing.
//
// Connections are served concurrently: a pool of `threads` threads polls them with epoll, so
// idle or slow clients cost a file descriptor and a slot of `maxConnections`, not a thread's
// time. A connection idle for `connectionTimeoutS` is closed; so is one whose body is still
// arriving that long after its headers; headers beyond kMaxHeaderBytes (16 KiB) get 413, beyond
// libmicrohttpd's 64 KiB connection memory 431; a Content-Length beyond 4 KiB on /control 413
// without the body being read. There is no per-address limit: Prometheus scraping from the same
// host as a flood of idle connections must still get through.
//
// The threads start with the system's default stack size (MHD_OPTION_THREAD_STACK_SIZE 0: glibc's,
// from RLIMIT_STACK), which leaves room for the static TLS of the process. Not civetweb
// (prometheus-cpp's Exposer): its threads are created with a fixed 100 KiB stack, which
// pthread_create refuses in processes whose static TLS is larger (LibTorch with OpenBLAS and glog
// already is), so the endpoint would not start inside a training job. If the threads cannot be
// started, the error is logged and counted and nothing is served (serving() is false).
//
// A port already in use is not fatal: the error is logged and counted, and the server listens on a
// port the kernel picks instead (port() says which; the file_sd file carries it). The destructor
// closes every connection, stuck ones too, and joins the threads.
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
  struct Callbacks;  // libmicrohttpd's callbacks (MetricsServer.cpp)
  int listen(int port, int* bound, std::string* error);  // a listening socket, or -1
  bool start(int fd);                                    // takes the socket

  MetricsServerOptions options_;
  std::shared_ptr<MetricsSnapshot> snapshot_ = std::make_shared<MetricsSnapshot>();
  std::unique_ptr<detail::MetricsEndpoint> endpoint_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
  bool fallback_ = false;
  std::atomic<uint64_t> errors_{0};
  std::atomic<bool> starting_{false};  // libmicrohttpd's messages while starting are errors
};

}  // namespace attnscope
