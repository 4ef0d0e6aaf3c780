#include "attnscope/exporters/MetricsServer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>
#include <stdexcept>

#include "attnscope/core/Config.h"
#include "attnscope/core/Log.h"

namespace attnscope {
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

constexpr size_t kMaxHeaderBytes = 16 * 1024;
constexpr size_t kMaxBodyBytes = 4 * 1024;
constexpr int kSocketTimeoutMs = 2000;

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
    buffer = (buffer << 6) | v;
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

const char* reasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    default:
      return "Error";
  }
}

bool sendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

void respond(int fd, int status, const std::string& contentType, const std::string& body,
             const std::string& extraHeaders = "") {
  std::ostringstream head;
  head << "HTTP/1.1 " << status << " " << reasonPhrase(status)
       << "\r\nContent-Type: " << contentType << "\r\nContent-Length: " << body.size() << "\r\n"
       << extraHeaders << "Connection: close\r\n\r\n";
  sendAll(fd, head.str() + body);
}

std::string stateJson(const ControlState& s) {
  std::ostringstream out;
  out << "{\"generation\": " << s.generation << ", \"paused\": " << (s.paused ? "true" : "false")
      << ", \"sample_every\": " << s.sampleEvery
      << ", \"applies\": \"at the next aggregation round\"}";
  return out.str();
}

}  // namespace

MetricsServer::MetricsServer(const MetricsServerOptions& options) : options_(options) {
  control_.sampleEvery = options.sampleEvery;
  const std::string wanted = options.bind + ":" + std::to_string(options.port);
  std::string error;
  if (!listen(options.port, &error)) {
    errors_.fetch_add(1);
    std::string second;
    if (options.port != 0 && listen(0, &second)) {
      fallback_ = true;
      ATTNSCOPE_LOG(kError, "metrics port "
                                << wanted << " is not available (" << error
                                << "); serving /metrics on " << options.bind << ":" << port_
                                << " instead (see attnscope_exporter_port and the file_sd file)");
    } else {
      ATTNSCOPE_LOG(kError, "metrics endpoint could not listen on "
                                << wanted << " (" << error
                                << ") nor on a free port; Prometheus export "
                                   "is off on this rank");
      return;
    }
  }
  wakeFd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { serve(); });
}

bool MetricsServer::listen(int port, std::string* error) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, options_.bind.c_str(), &addr.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0) {
    *error = std::strerror(errno);
    ::close(fd);
    return false;
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  listenFd_ = fd;
  port_ = ntohs(addr.sin_port);
  return true;
}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(wakeFd_, &one, sizeof(one));
    thread_.join();
  }
  if (listenFd_ >= 0) ::close(listenFd_);
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

void MetricsServer::serve() {
  while (true) {
    pollfd fds[2] = {{listenFd_, POLLIN, 0}, {wakeFd_, POLLIN, 0}};
    const int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN) != 0) break;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval timeout{kSocketTimeoutMs / 1000, (kSocketTimeoutMs % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    try {
      handle(fd);
    } catch (const std::exception& e) {
      ATTNSCOPE_LOG(kDebug, "metrics request failed: " << e.what());
    }
    ::close(fd);
  }
}

void MetricsServer::handle(int fd) {
  // Request line and headers, then a body up to Content-Length (only /control reads one).
  std::string data;
  char buffer[4096];
  size_t headerEnd = std::string::npos;
  while ((headerEnd = data.find("\r\n\r\n")) == std::string::npos) {
    if (data.size() > kMaxHeaderBytes)
      return respond(fd, 413, "text/plain", "request headers too large\n");
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return;  // closed or timed out
    data.append(buffer, static_cast<size_t>(n));
  }
  std::istringstream head(data.substr(0, headerEnd));
  std::string method, target, version, line;
  head >> method >> target >> version;
  std::getline(head, line);
  std::string authorization;
  size_t contentLength = 0;
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = lowerCase(line.substr(0, colon));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (name == "authorization") authorization = value;
    if (name == "content-length")
      contentLength = static_cast<size_t>(std::strtoull(value.c_str(), nullptr, 10));
  }
  const auto question = target.find('?');
  const std::string path = target.substr(0, question);
  std::string query = question == std::string::npos ? "" : target.substr(question + 1);

  if (path == "/metrics") {
    if (method != "GET" && method != "HEAD") {
      return respond(fd, 405, "text/plain", "method " + method + " is not allowed; allowed: GET\n");
    }
    if (!options_.credentials.empty()) {
      const bool basic = lowerCase(authorization.substr(0, 6)) == "basic ";
      if (!basic ||
          !constantTimeEquals(base64Decode(authorization.substr(6)), options_.credentials)) {
        return respond(fd, 401, "text/plain", "credentials required (HTTP basic auth)\n",
                       "WWW-Authenticate: Basic realm=\"attnscope\"\r\n");
      }
    }
    const std::string text = prometheus::TextSerializer().Serialize(snapshot_->Collect());
    return respond(fd, 200, "text/plain; version=0.0.4; charset=utf-8",
                   method == "HEAD" ? "" : text);
  }
  if (path == "/control") {
    if (options_.controlToken.empty()) {
      return respond(fd, 404, "application/json",
                     "{\"error\": \"runtime control is off; set ATTNSCOPE_CONTROL_TOKEN on rank 0 "
                     "to enable it\"}");
    }
    if (contentLength > kMaxBodyBytes) return respond(fd, 413, "text/plain", "body too large\n");
    std::string body = data.substr(headerEnd + 4);
    while (body.size() < contentLength) {
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      body.append(buffer, static_cast<size_t>(n));
    }
    body.resize(std::min(body.size(), contentLength));
    if (!body.empty()) query += (query.empty() ? "" : "&") + body;
    std::string reply;
    const int status = handleControl(method, authorization, query, &reply);
    return respond(fd, status, "application/json", reply,
                   status == 401 ? "WWW-Authenticate: Bearer realm=\"attnscope\"\r\n" : "");
  }
  if (path == "/") {
    return respond(fd, 200, "text/plain", "attnscope: metrics at /metrics\n");
  }
  respond(fd, 404, "text/plain", "not found; try /metrics\n");
}

ControlState MetricsServer::control() const {
  std::lock_guard<std::mutex> lock(controlMutex_);
  return control_;
}

int MetricsServer::handleControl(const std::string& method, const std::string& authorization,
                                 const std::string& query, std::string* body) {
  if (!constantTimeEquals(authorization, "Bearer " + options_.controlToken)) {
    *body =
        "{\"error\": \"missing or wrong bearer token (Authorization: Bearer "
        "<ATTNSCOPE_CONTROL_TOKEN>)\"}";
    return 401;
  }
  std::lock_guard<std::mutex> lock(controlMutex_);
  if (method == "GET") {
    *body = stateJson(control_);
    return 200;
  }
  if (method != "POST") {
    *body = "{\"error\": \"method " + method + " is not allowed; allowed: GET, POST\"}";
    return 405;
  }
  ControlState next = control_;
  bool understood = !query.empty();
  std::istringstream parts(query);
  for (std::string part; std::getline(parts, part, '&');) {
    const auto eq = part.find('=');
    const std::string key = part.substr(0, eq),
                      value = eq == std::string::npos ? "" : part.substr(eq + 1);
    if (key == "action" && value == "pause") {
      next.paused = true;
    } else if (key == "action" && value == "resume") {
      next.paused = false;
    } else if (key == "sample_every" && parseSampleEvery(value, &next.sampleEvery)) {
    } else {
      understood = false;
    }
  }
  if (!understood) {
    const Config::Variable& every = Config::variable(kEnvSampleEvery);
    std::ostringstream allowed;
    allowed << "action=pause, action=resume, sample_every=<" << static_cast<int64_t>(every.min)
            << ".." << static_cast<int64_t>(every.max) << ">";
    *body =
        "{\"error\": \"request '" + query + "' not understood; allowed: " + allowed.str() + "\"}";
    return 400;
  }
  next.generation = control_.generation + 1;
  control_ = next;
  ATTNSCOPE_LOG(kInfo, "control request accepted: " << (next.paused ? "paused" : "recording")
                                                    << ", sample every " << next.sampleEvery
                                                    << " (applies at the next aggregation round)");
  *body = stateJson(control_);
  return 200;
}

}  // namespace attnscope
