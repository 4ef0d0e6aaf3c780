#include "attnscope/exporters/Pusher.h"

#include <prometheus/gateway.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <utility>

#include "attnscope/core/Log.h"

namespace attnscope {

// Everything the push thread touches. Shared between the Pusher and its thread, so a thread left
// behind by finish() (a gateway that never answers) keeps it alive after the Pusher is gone.
struct Pusher::State {
  std::shared_ptr<MetricsSnapshot> snapshot;
  std::unique_ptr<prometheus::Gateway> gateway;
  std::string url;
  std::atomic<uint64_t> pushes{0};
  std::atomic<uint64_t> errors{0};
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t requested = 0;
  uint64_t done = 0;
  bool stopping = false;
};

Pusher::Pusher(const std::string& url, const std::string& job, const std::string& instance,
               const std::string& credentials, std::shared_ptr<MetricsSnapshot> snapshot)
    : state_(std::make_shared<State>()) {
  state_->snapshot = std::move(snapshot);
  state_->url = url;
  // url was validated as http://host:port[/]
  const std::string rest = url.substr(7);
  const auto colon = rest.find(':');
  std::string port = rest.substr(colon + 1);
  while (!port.empty() && port.back() == '/') port.pop_back();
  const auto sep = credentials.find(':');
  state_->gateway = std::make_unique<prometheus::Gateway>(
      "http://" + rest.substr(0, colon), port, job, prometheus::Labels{{"instance", instance}},
      sep == std::string::npos ? "" : credentials.substr(0, sep),
      sep == std::string::npos ? "" : credentials.substr(sep + 1));
  state_->gateway->RegisterCollectable(state_->snapshot);
  thread_ = std::thread([state = state_] { run(state); });
}

Pusher::~Pusher() { finish(5.0); }

uint64_t Pusher::pushes() const { return state_->pushes.load(); }
uint64_t Pusher::errors() const { return state_->errors.load(); }

void Pusher::request() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    ++state_->requested;
  }
  state_->cv.notify_all();
}

void Pusher::run(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_lock<std::mutex> lock(s.mutex);
  while (true) {
    s.cv.wait(lock, [&s] { return s.stopping || s.requested > s.done; });
    if (s.requested == s.done && s.stopping) break;
    const uint64_t target = s.requested;
    lock.unlock();
    int status = -1;
    try {
      status = s.gateway->Push();
    } catch (const std::exception& e) {
      ATTNSCOPE_LOG(kDebug, "push failed: " << e.what());
    }
    if (status >= 200 && status < 300) {
      s.pushes.fetch_add(1);
    } else if (s.errors.fetch_add(1) == 0) {
      ATTNSCOPE_LOG(
          kError,
          "push to " << s.url << " failed (status " << status
                     << "); retrying every interval, counted in attnscope_push_errors_total");
    }
    lock.lock();
    s.done = target;
    s.cv.notify_all();
  }
}

void Pusher::finish(double timeoutSeconds) {
  if (finished_) return;
  finished_ = true;
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  ++s.requested;
  s.stopping = true;
  const uint64_t target = s.requested;
  s.cv.notify_all();
  const bool done = s.cv.wait_for(lock, std::chrono::duration<double>(timeoutSeconds),
                                  [&] { return s.done >= target; });
  lock.unlock();
  if (done) {
    thread_.join();
  } else {
    ATTNSCOPE_LOG(kError, "the last push to " << s.url << " did not finish within "
                                              << timeoutSeconds << " s; leaving it behind");
    thread_.detach();  // it owns a share of state_: nothing it touches is freed under it
  }
}

}  // namespace attnscope
