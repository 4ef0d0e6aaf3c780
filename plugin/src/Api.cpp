// The public entry points of attnscope.h.
#include <memory>
#include <mutex>
#include <vector>

#include "Observer.h"
#include "Session.h"
#include "attnscope/attnscope.h"
#include "attnscope/core/Log.h"
#include "attnscope/exporters/SummaryJson.h"

namespace attnscope {
namespace {

std::mutex gLifecycleMutex;
// Stopped sessions stay allocated: a callback on another thread may still hold the pointer.
std::vector<std::unique_ptr<detail::Session>>& retired() {
  static std::vector<std::unique_ptr<detail::Session>> sessions;
  return sessions;
}
std::unique_ptr<detail::Session>& active() {
  static std::unique_ptr<detail::Session> session;
  return session;
}

void stopLocked() {
  auto& session = active();
  if (!session) return;
  detail::setCurrentSession(nullptr);
  session->finish();
  retired().push_back(std::move(session));
}

}  // namespace

const char* version() { return ATTNSCOPE_VERSION; }

void start(const Config& config) {
  config.validate();
  std::lock_guard<std::mutex> lock(gLifecycleMutex);
  stopLocked();
  detail::Log::setLevel(config.logLevel);
  if (!config.enable) {
    ATTNSCOPE_LOG(kDebug, "disabled (ATTNSCOPE_ENABLE=0)");
    return;
  }
  auto session = std::make_unique<detail::Session>(config);
  detail::Log::setRank(session->runInfo().rank);
  session->begin();
  detail::setCurrentSession(session.get());
  active() = std::move(session);
}

void start() { start(Config::fromEnvironment()); }

void stop() {
  std::lock_guard<std::mutex> lock(gLifecycleMutex);
  try {
    stopLocked();
  } catch (const std::exception& e) {
    ATTNSCOPE_LOG(kError, "stop failed: " << e.what());
  }
}

void step() {
  detail::Session* s = detail::currentSession();
  if (s != nullptr) s->step(true);
}

bool isRunning() { return detail::currentSession() != nullptr; }

StatsTable statistics() {
  detail::Session* s = detail::currentSession();
  return s != nullptr ? s->statistics() : StatsTable();
}

RunInfo runInfo() {
  detail::Session* s = detail::currentSession();
  return s != nullptr ? s->runInfo() : RunInfo();
}

std::string summaryJson() {
  detail::Session* s = detail::currentSession();
  if (s == nullptr) return SummaryJson::render(RunInfo(), StatsTable());
  return SummaryJson::render(s->runInfo(), s->statistics());
}

AttentionScope::AttentionScope(const char* layerName) {
  detail::Session* s = detail::currentSession();
  if (s == nullptr) return;
  if (s->autoStepPending()) s->step(false);
  if (!s->sampled()) return;
  active_ = detail::Observer::enterScope(s, layerName);
}

AttentionScope::~AttentionScope() {
  if (active_) detail::Observer::exitScope();
}

}  // namespace attnscope
