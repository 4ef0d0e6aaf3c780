// The reporter without Prometheus export: this build has no prometheus-cpp
// (ATTNSCOPE_WITH_PROMETHEUS off). Nothing is served or pushed, no file_sd file is written, and
// /control does not exist; a configured port is reported once at start.
#include "attnscope/core/Log.h"
#include "attnscope/reporter/Reporter.h"

namespace attnscope {
namespace detail {

void Reporter::startExport(const RoundSnapshot& /*snapshot*/) {
  if (config_.port > 0 || !config_.pushgateway.empty() || !config_.fileSd.empty()) {
    ATTNSCOPE_LOG(kInfo,
                  "Prometheus export is not in this build (built without prometheus-cpp); "
                  "ATTNSCOPE_PORT, ATTNSCOPE_PUSHGATEWAY and ATTNSCOPE_FILE_SD have no effect");
  }
}
void Reporter::publishMetrics(const RoundSnapshot& /*snapshot*/) {}
void Reporter::finishExport() {}
bool Reporter::exchangeEndpoints(std::string* /*error*/) {
  endpointsExchanged_ = true;  // every rank runs the same build: none has an endpoint to tell
  return true;
}
void Reporter::requestedControl(RankWindow* /*mine*/) {}
void Reporter::writeOwnTarget() { endpointsExchanged_ = true; }
int Reporter::metricsPort() const { return 0; }

}  // namespace detail
}  // namespace attnscope
