#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "attnscope/exporters/MetricsSnapshot.h"

namespace attnscope {

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

}  // namespace attnscope
