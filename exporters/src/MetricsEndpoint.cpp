#include "MetricsEndpoint.h"

#include <prometheus/text_serializer.h>

#include <cctype>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "attnscope/core/Config.h"
#include "attnscope/core/Log.h"

namespace attnscope {
namespace detail {
namespace {

// /control's sample_every: the range and parsing of ATTNSCOPE_SAMPLE_EVERY's declaration.
bool parseSampleEvery(const std::string& value, int64_t* out) {
  if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) return false;
  Config probe;
  try {
    probe.set(kEnvSampleEvery, value);
  } catch (const std::invalid_argument&) {
    return false;
  }
  *out = probe.sampleEvery;
  return true;
}

// Equal strings in time that depends on the lengths only.
bool constantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& longer = a.size() >= b.size() ? a : b;
  for (size_t i = 0; i < longer.size(); ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::string base64Decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int bits = 0, buffer = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) break;  // '=' padding or garbage ends the value
    buffer = ((buffer << 6) | v) & 0xFFFFFF;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return out;
}

std::string lowerCase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The state, and what it costs: the series this endpoint serves now (per-layer series change it
// at the next reporting interval).
std::string stateJson(const ControlState& s, bool jobControl, size_t series) {
  std::ostringstream out;
  out << "{";
  if (jobControl) {
    out << "\"generation\": " << s.generation << ", \"paused\": " << (s.paused ? "true" : "false")
        << ", \"sample_every\": " << s.sampleEvery
        << ", \"applies\": \"at the next aggregation round\", ";
  }
  out << "\"layers\": " << (s.layerDetail ? "true" : "false") << ", \"series\": " << series
      << ", \"layers_apply\": \"to this rank's endpoint at the next reporting interval\"}";
  return out.str();
}

HttpResponse text(int status, std::string body) {
  return {status, "text/plain", std::move(body), ""};
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(std::string credentials, std::string controlToken,
                                 int64_t sampleEvery, std::shared_ptr<MetricsSnapshot> snapshot,
                                 bool jobControl, bool layerDetail)
    : credentials_(std::move(credentials)),
      controlToken_(std::move(controlToken)),
      snapshot_(std::move(snapshot)),
      jobControl_(jobControl) {
  control_.sampleEvery = sampleEvery;
  control_.layerDetail = layerDetail;
}

HttpResponse MetricsEndpoint::handle(const HttpRequest& request) {
  if (request.headerBytes > kMaxHeaderBytes) return text(413, "request headers too large\n");
  const auto question = request.target.find('?');
  const std::string path = request.target.substr(0, question);
  const std::string& method = request.method;

  if (path == "/metrics") {
    if (method != "GET" && method != "HEAD") {
      return text(405, "method " + method + " is not allowed; allowed: GET\n");
    }
    if (!credentials_.empty()) {
      const std::string& authorization = request.authorization;
      const bool basic = lowerCase(authorization.substr(0, 6)) == "basic ";
      if (!basic || !constantTimeEquals(base64Decode(authorization.substr(6)), credentials_)) {
        HttpResponse r = text(401, "credentials required (HTTP basic auth)\n");
        r.wwwAuthenticate = "Basic realm=\"attnscope\"";
        return r;
      }
    }
    std::string metrics = prometheus::TextSerializer().Serialize(snapshot_->Collect());
    return {200, "text/plain; version=0.0.4; charset=utf-8",
            method == "HEAD" ? std::string() : std::move(metrics), ""};
  }
  if (path == "/control") {
    if (controlToken_.empty()) {
      return {404, "application/json",
              "{\"error\": \"runtime control is off; set ATTNSCOPE_CONTROL_TOKEN to enable it\"}",
              ""};
    }
    if (request.bodyTooLarge) return text(413, "body too large\n");
    std::string query = question == std::string::npos ? "" : request.target.substr(question + 1);
    if (!request.body.empty()) query += (query.empty() ? "" : "&") + request.body;
    HttpResponse r{0, "application/json", "", ""};
    r.status = handleControl(method, request.authorization, query, &r.body);
    if (r.status == 401) r.wwwAuthenticate = "Bearer realm=\"attnscope\"";
    return r;
  }
  if (path == "/") return text(200, "attnscope: metrics at /metrics\n");
  return text(404, "not found; try /metrics\n");
}

ControlState MetricsEndpoint::control() const {
  std::lock_guard<std::mutex> lock(controlMutex_);
  return control_;
}

int MetricsEndpoint::handleControl(const std::string& method, const std::string& authorization,
                                   const std::string& query, std::string* body) {
  if (!constantTimeEquals(authorization, "Bearer " + controlToken_)) {
    *body =
        "{\"error\": \"missing or wrong bearer token (Authorization: Bearer "
        "<ATTNSCOPE_CONTROL_TOKEN>)\"}";
    return 401;
  }
  const size_t series = snapshot_->series();
  std::lock_guard<std::mutex> lock(controlMutex_);
  if (method == "GET") {
    *body = stateJson(control_, jobControl_, series);
    return 200;
  }
  if (method != "POST") {
    *body = "{\"error\": \"method " + method + " is not allowed; allowed: GET, POST\"}";
    return 405;
  }
  ControlState next = control_;
  bool understood = !query.empty(), jobWide = false, layers = false;
  std::istringstream parts(query);
  for (std::string part; std::getline(parts, part, '&');) {
    const auto eq = part.find('=');
    const std::string key = part.substr(0, eq),
                      value = eq == std::string::npos ? "" : part.substr(eq + 1);
    if (jobControl_ && key == "action" && value == "pause") {
      next.paused = true;
      jobWide = true;
    } else if (jobControl_ && key == "action" && value == "resume") {
      next.paused = false;
      jobWide = true;
    } else if (jobControl_ && key == "sample_every" && parseSampleEvery(value, &next.sampleEvery)) {
      jobWide = true;
    } else if (key == "layers" && (value == "on" || value == "off")) {
      next.layerDetail = value == "on";
      layers = true;
    } else {
      understood = false;
    }
  }
  if (!understood) {
    std::ostringstream allowed;
    if (jobControl_) {
      const Config::Variable& every = Config::variable(kEnvSampleEvery);
      allowed << "action=pause, action=resume, sample_every=<" << static_cast<int64_t>(every.min)
              << ".." << static_cast<int64_t>(every.max) << ">, layers=on|off";
    } else {
      allowed << "layers=on|off (pause, resume and sample_every are rank 0's)";
    }
    *body =
        "{\"error\": \"request '" + query + "' not understood; allowed: " + allowed.str() + "\"}";
    return 400;
  }
  if (jobWide) {
    next.generation = control_.generation + 1;
    ATTNSCOPE_LOG(kInfo, "control request accepted: "
                             << (next.paused ? "paused" : "recording") << ", sample every "
                             << next.sampleEvery << " (applies at the next aggregation round)");
  }
  if (layers && next.layerDetail != control_.layerDetail) {
    ATTNSCOPE_LOG(kInfo, "control request accepted: per-layer series "
                             << (next.layerDetail ? "on" : "off")
                             << " on this rank from the next reporting interval (now " << series
                             << " series)");
  }
  control_ = next;
  *body = stateJson(control_, jobControl_, series);
  return 200;
}

}  // namespace detail
}  // namespace attnscope
