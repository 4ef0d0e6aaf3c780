// libFuzzer target for the request handling that is attnscope's own (detail::MetricsEndpoint:
// routes, basic auth, the bearer token, /control's parsing, the size limits); libmicrohttpd frames
// the requests before it. An input is "METHOD\nTARGET\nAUTHORIZATION\nFLAGS\nBODY", FLAGS holding
// 'c' (basic auth on), 't' (a control token), 'r' (a rank other than 0: /control takes only
// layers=on|off), 'L' (the body was too large), 'H' (headers too large). Besides crashes and
// sanitizer reports, it stops on an answer outside the endpoint's contract. Built and run by
// tests/integration/fuzz_metrics_endpoint.sh with clang.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "MetricsEndpoint.h"

using attnscope::MetricsSnapshot;
using attnscope::detail::HttpRequest;
using attnscope::detail::HttpResponse;
using attnscope::detail::MetricsEndpoint;

namespace {

std::shared_ptr<MetricsSnapshot> snapshot() {
  static const std::shared_ptr<MetricsSnapshot> s = [] {
    prometheus::ClientMetric m;
    m.label = {{"rank", "0"}};
    m.counter.value = 1;
    auto p = std::make_shared<MetricsSnapshot>();
    p->publish({{"attnscope_steps_total", "steps", prometheus::MetricType::Counter, {m}}});
    return p;
  }();
  return s;
}

void fail(const char* what, const HttpRequest& r, const HttpResponse& a) {
  std::fprintf(stderr, "contract broken: %s (status %d, method '%s', target '%s', body '%s')\n",
               what, a.status, r.method.c_str(), r.target.c_str(), a.body.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string fields[4];
  size_t at = 0;
  for (std::string& field : fields) {
    const size_t end = input.find('\n', at);
    if (end == std::string::npos) return 0;
    field = input.substr(at, end - at);
    at = end + 1;
  }
  const std::string& flags = fields[3];
  const bool credentials = flags.find('c') != std::string::npos;
  const bool token = flags.find('t') != std::string::npos;
  HttpRequest request;
  request.method = fields[0];
  request.target = fields[1];
  request.authorization = fields[2];
  request.body = input.substr(at, MetricsEndpoint::kMaxBodyBytes);
  request.bodyTooLarge = flags.find('L') != std::string::npos;
  request.headerBytes = flags.find('H') != std::string::npos
                            ? MetricsEndpoint::kMaxHeaderBytes + 1
                            : request.method.size() + request.target.size() + 40;
  const bool jobControl = flags.find('r') == std::string::npos;
  MetricsEndpoint endpoint(credentials ? "prom:s3cret" : "", token ? "tok" : "", 1, snapshot(),
                           jobControl);
  const HttpResponse a = endpoint.handle(request);
  switch (a.status) {
    case 200:
    case 400:
    case 401:
    case 404:
    case 405:
    case 413:
      break;
    default:
      fail("a status the endpoint never answers", request, a);
  }
  if (a.contentType.empty()) fail("no Content-Type", request, a);
  if ((a.status == 401) != !a.wwwAuthenticate.empty()) fail("401 without challenge", request, a);
  if (request.headerBytes > MetricsEndpoint::kMaxHeaderBytes && a.status != 413) {
    fail("headers over the limit not refused", request, a);
  }
  const std::string path = request.target.substr(0, request.target.find('?'));
  const attnscope::ControlState state = endpoint.control();
  const bool accepted = a.status == 200 && request.method == "POST" && path == "/control";
  const bool changed = state.generation > 0 || state.layerDetail;
  if (state.generation > 1 || (changed && !accepted)) {
    fail("the control state changed without an accepted POST", request, a);
  }
  if (state.generation > 0 && !jobControl) {
    fail("a job-wide request accepted on a rank other than 0", request, a);
  }
  if (accepted && jobControl && state.generation != 1 &&
      request.body.find("layers=") == std::string::npos &&
      request.target.find("layers=") == std::string::npos) {
    fail("a POST accepted without a change", request, a);
  }
  if ((changed || accepted) && request.authorization != "Bearer tok") {
    fail("control accepted without the token", request, a);
  }
  // base64 of "prom:s3cret" but its last character, whose low bits are dropped.
  if (a.status == 200 && path == "/metrics" && credentials &&
      request.authorization.substr(6, 14) != "cHJvbTpzM2NyZX") {
    fail("metrics served without the credentials", request, a);
  }
  return 0;
}
