#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "attnscope/exporters/ControlState.h"
#include "attnscope/exporters/MetricsSnapshot.h"

namespace attnscope {
namespace detail {

// One HTTP request as the endpoint sees it, once the HTTP library has framed it.
struct HttpRequest {
  std::string method;
  std::string target;         // as sent: the path, then '?' and the query (nothing unescaped)
  std::string authorization;  // the Authorization header's value; empty: none
  size_t headerBytes = 0;     // the request line and header fields, as received
  bool bodyTooLarge = false;  // the body is beyond kMaxBodyBytes and was not read
  std::string body;           // up to kMaxBodyBytes
};

struct HttpResponse {
  int status = 200;
  std::string contentType;
  std::string body;
  std::string wwwAuthenticate;  // the WWW-Authenticate header's value; empty: none
};

// What the /metrics and /control endpoint answers, without sockets: the routes, basic auth on
// /metrics, the bearer token and the request parsing of /control, the size limits. A pure
// function of the request and the state it holds (the control state and the published
// snapshot), safe to call from several threads at once; MetricsServer hands it the requests
// libmicrohttpd frames, and exporters/fuzz/MetricsEndpointFuzz.cpp hands it arbitrary ones.
class MetricsEndpoint {
 public:
  static constexpr size_t kMaxHeaderBytes = 16 * 1024;
  static constexpr size_t kMaxBodyBytes = 4 * 1024;

  // credentials: "user:password" for basic auth on /metrics (empty: none); controlToken: the
  // bearer token of /control (empty: /control answers 404). jobControl: this endpoint takes the
  // job-wide requests (rank 0's); every endpoint takes layers=on|off, starting at layerDetail.
  MetricsEndpoint(std::string credentials, std::string controlToken, int64_t sampleEvery,
                  std::shared_ptr<MetricsSnapshot> snapshot, bool jobControl = true,
                  bool layerDetail = false);

  // 200 with the snapshot in Prometheus text format (an empty body for HEAD); 401 with
  // WWW-Authenticate Basic without the credentials; 405 for other methods on /metrics; /control
  // as handleControl(), with the body (form fields) appended to the query, 404 when it is off;
  // 413 when the headers or /control's body are too large; 200 on /, 404 elsewhere.
  HttpResponse handle(const HttpRequest& request);

  ControlState control() const;
  // One /control request: returns the HTTP status and fills `body` (JSON): 401 without the token,
  // 405 for other methods than GET and POST, 400 for a request that is not action=pause|resume,
  // sample_every=N (both only with jobControl) or layers=on|off; 200 with the new state (POST) or
  // the current one (GET), with the series the endpoint serves now.
  int handleControl(const std::string& method, const std::string& authorization,
                    const std::string& query, std::string* body);

 private:
  const std::string credentials_;
  const std::string controlToken_;
  const std::shared_ptr<MetricsSnapshot> snapshot_;
  const bool jobControl_;
  mutable std::mutex controlMutex_;
  ControlState control_;
};

}  // namespace detail
}  // namespace attnscope
