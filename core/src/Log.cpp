#include "attnscope/core/Log.h"

#include <cstdio>
#include <mutex>

namespace attnscope {

const char* logLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kOff:
      return "off";
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

namespace detail {

std::atomic<int> Log::level_{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> Log::rank_{-1};

void Log::setLevel(LogLevel level) { level_.store(static_cast<int>(level)); }
LogLevel Log::level() { return static_cast<LogLevel>(level_.load()); }
void Log::setRank(int rank) { rank_.store(rank); }

void Log::write(LogLevel level, const std::string& message) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const int rank = rank_.load();
  if (rank >= 0) {
    std::fprintf(stderr, "[attnscope rank %d] %s: %s\n", rank, logLevelName(level),
                 message.c_str());
  } else {
    std::fprintf(stderr, "[attnscope] %s: %s\n", logLevelName(level), message.c_str());
  }
}

}  // namespace detail
}  // namespace attnscope
