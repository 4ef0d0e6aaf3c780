#pragma once

#include <atomic>
#include <sstream>
#include <string>

#include "attnscope/core/Export.h"

namespace attnscope {

// Ordered from quietest to loudest; a message is printed when its level <= the configured level.
enum class LogLevel : int { kOff = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

// "off", "error", "warn", "info", "debug".
ATTNSCOPE_API const char* logLevelName(LogLevel level);

namespace detail {

// Process-wide log settings. Logging goes to stderr, one line per message, prefixed with
// "[attnscope rank N] LEVEL: ". Never throws.
class ATTNSCOPE_API Log {
 public:
  static void setLevel(LogLevel level);
  static LogLevel level();
  static void setRank(int rank);
  static bool enabled(LogLevel level) {
    return static_cast<int>(level) <= level_.load(std::memory_order_relaxed);
  }
  static void write(LogLevel level, const std::string& message);

 private:
  static std::atomic<int> level_;
  static std::atomic<int> rank_;
};

}  // namespace detail
}  // namespace attnscope

#define ATTNSCOPE_LOG(LEVEL, EXPR)                                                            \
  do {                                                                                        \
    if (::attnscope::detail::Log::enabled(::attnscope::LogLevel::LEVEL)) {                    \
      std::ostringstream attnscope_log_ss_;                                                   \
      attnscope_log_ss_ << EXPR;                                                              \
      ::attnscope::detail::Log::write(::attnscope::LogLevel::LEVEL, attnscope_log_ss_.str()); \
    }                                                                                         \
  } while (0)
