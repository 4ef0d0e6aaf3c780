#include "attnscope/exporters/MetricsServer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "MetricsEndpoint.h"
#include "attnscope/core/Log.h"

namespace attnscope {
namespace {

using detail::MetricsEndpoint;

// libmicrohttpd's memory per connection: the request line and headers must fit (beyond it the
// client gets 431), with room above MetricsEndpoint::kMaxHeaderBytes so that its 413 is reached.
constexpr size_t kConnectionMemoryBytes = 64 * 1024;

// One request, from its request line (the URI log callback) to its completion callback.
struct RequestState {
  detail::HttpRequest request;
  bool headersSeen = false;
  std::chrono::steady_clock::time_point headersAt;
};

MHD_Result addHeaderBytes(void* cls, MHD_ValueKind, const char* key, const char* value) {
  *static_cast<size_t*>(cls) += std::strlen(key) + (value ? std::strlen(value) : 0) + 4;
  return MHD_YES;
}

void deleteString(void* cls) { delete static_cast<std::string*>(cls); }

MHD_Result respond(MetricsEndpoint& endpoint, MHD_Connection* connection,
                   const detail::HttpRequest& request) {
  detail::HttpResponse r = endpoint.handle(request);
  auto* body = new std::string(std::move(r.body));
  MHD_Response* response = MHD_create_response_from_buffer_with_free_callback_cls(
      body->size(), body->data(), &deleteString, body);
  if (response == nullptr) {
    delete body;
    return MHD_NO;
  }
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r.contentType.c_str());
  if (!r.wwwAuthenticate.empty()) {
    MHD_add_response_header(response, MHD_HTTP_HEADER_WWW_AUTHENTICATE, r.wwwAuthenticate.c_str());
  }
  const MHD_Result queued =
      MHD_queue_response(connection, static_cast<unsigned>(r.status), response);
  MHD_destroy_response(response);
  return queued;
}

}  // namespace

// libmicrohttpd calls these on its threads; none lets an exception out.
struct MetricsServer::Callbacks {
  // The request line has arrived: `uri` is the target as sent (before libmicrohttpd splits and
  // unescapes it).
  static void* begin(void*, const char* uri, MHD_Connection*) noexcept {
    try {
      auto* state = new RequestState;
      state->request.target = uri != nullptr ? uri : "";
      return state;
    } catch (const std::exception&) {
      return nullptr;
    }
  }

  static void completed(void*, MHD_Connection*, void** requestState,
                        MHD_RequestTerminationCode) noexcept {
    delete static_cast<RequestState*>(*requestState);
    *requestState = nullptr;
  }

  // Called once the headers are in, once per piece of body, and once the request is complete.
  static MHD_Result access(void* cls, MHD_Connection* connection, const char* url,
                           const char* method, const char* version, const char* upload,
                           size_t* uploadSize, void** requestState) noexcept {
    auto* server = static_cast<MetricsServer*>(cls);
    try {
      auto* state = static_cast<RequestState*>(*requestState);
      if (state == nullptr) {  // begin() could not allocate
        state = new RequestState;
        state->request.target = url;
        *requestState = state;
      }
      detail::HttpRequest& request = state->request;
      const auto now = std::chrono::steady_clock::now();
      if (!state->headersSeen) {
        state->headersSeen = true;
        state->headersAt = now;
        request.method = method;
        const char* authorization =
            MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (authorization != nullptr) request.authorization = authorization;
        request.headerBytes = request.method.size() + request.target.size() + std::strlen(version) +
                              4;  // two spaces, CRLF
        MHD_get_connection_values(connection, MHD_HEADER_KIND, &addHeaderBytes,
                                  &request.headerBytes);
        const char* length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                         MHD_HTTP_HEADER_CONTENT_LENGTH);
        request.bodyTooLarge = length != nullptr &&
                               std::strtoull(length, nullptr, 10) > MetricsEndpoint::kMaxBodyBytes;
        // Answered before the body: libmicrohttpd drops the rest and closes the connection.
        if (request.bodyTooLarge || request.headerBytes > MetricsEndpoint::kMaxHeaderBytes) {
          return respond(*server->endpoint_, connection, request);
        }
        return MHD_YES;
      }
      if (*uploadSize != 0) {
        if (now - state->headersAt > std::chrono::seconds(server->options_.connectionTimeoutS)) {
          ATTNSCOPE_LOG(kDebug,
                        "metrics endpoint: closing a connection whose body is still "
                        "arriving "
                            << server->options_.connectionTimeoutS << " s after its headers");
          return MHD_NO;
        }
        if (!request.bodyTooLarge &&
            request.body.size() + *uploadSize <= MetricsEndpoint::kMaxBodyBytes) {
          request.body.append(upload, *uploadSize);
        } else {  // a chunked body beyond the limit: read to its end, answered 413
          request.bodyTooLarge = true;
          request.body.clear();
        }
        *uploadSize = 0;
        return MHD_YES;
      }
      return respond(*server->endpoint_, connection, request);
    } catch (const std::exception& e) {
      ATTNSCOPE_LOG(kDebug, "metrics request failed: " << e.what());
      return MHD_NO;
    }
  }

  // libmicrohttpd's own messages: why a start failed (an error), else what clients did (debug).
  static void log(void* cls, const char* format, va_list args) noexcept {
    auto* server = static_cast<MetricsServer*>(cls);
    char line[512];
    std::vsnprintf(line, sizeof(line), format, args);
    std::string message(line);
    while (!message.empty() && (message.back() == '\n' || message.back() == '\r'))
      message.pop_back();
    if (server->starting_.load()) {
      ATTNSCOPE_LOG(kError, "metrics endpoint (libmicrohttpd): " << message);
    } else {
      ATTNSCOPE_LOG(kDebug, "metrics endpoint (libmicrohttpd): " << message);
    }
  }
};

MetricsServer::MetricsServer(const MetricsServerOptions& options)
    : options_(options),
      endpoint_(std::make_unique<MetricsEndpoint>(options.credentials, options.controlToken,
                                                  options.sampleEvery, snapshot_,
                                                  options.jobControl, options.layerDetail)) {
  options_.connectionTimeoutS = std::max(1, options_.connectionTimeoutS);
  options_.threads = std::max(1, options_.threads);
  options_.maxConnections = std::max(options_.threads, options_.maxConnections);
  const std::string wanted = options.bind + ":" + std::to_string(options.port);
  std::string error;
  int port = 0;
  int fd = listen(options.port, &port, &error);
  if (fd < 0) {
    errors_.fetch_add(1);
    std::string second;
    if (options.port != 0 && (fd = listen(0, &port, &second)) >= 0) {
      fallback_ = true;
      ATTNSCOPE_LOG(kError, "metrics port "
                                << wanted << " is not available (" << error
                                << "); serving /metrics on " << options.bind << ":" << port
                                << " instead (see attnscope_exporter_port and the file_sd file)");
    } else {
      ATTNSCOPE_LOG(kError, "metrics endpoint could not listen on "
                                << wanted << " (" << error
                                << ") nor on a free port; Prometheus export "
                                   "is off on this rank");
      return;
    }
  }
  if (!start(fd)) {
    errors_.fetch_add(1);
    ATTNSCOPE_LOG(kError, "metrics endpoint could not start libmicrohttpd on "
                              << options.bind << ":" << port
                              << " (see the message above); Prometheus export is off on this rank");
    return;
  }
  port_ = port;
  ATTNSCOPE_LOG(kDebug, "metrics endpoint on "
                            << options.bind << ":" << port_ << ": " << options_.threads
                            << " threads, up to " << options_.maxConnections
                            << " connections, connection timeout " << options_.connectionTimeoutS
                            << " s");
}

int MetricsServer::listen(int port, int* bound, std::string* error) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, options_.bind.c_str(), &addr.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    *error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound = ntohs(addr.sin_port);
  return fd;
}

bool MetricsServer::start(int fd) {
  // libmicrohttpd closes the socket it is handed, when it stops and when it fails to start: it
  // gets a duplicate, and this one is closed here either way.
  const int handed = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (handed < 0) {
    ATTNSCOPE_LOG(kError,
                  "metrics endpoint: dup of the listening socket: " << std::strerror(errno));
    ::close(fd);
    return false;
  }
  if (MHD_is_feature_supported(MHD_FEATURE_AUTOSUPPRESS_SIGPIPE) != MHD_YES) {
    ATTNSCOPE_LOG(kWarn,
                  "this libmicrohttpd does not suppress SIGPIPE on its threads: a client "
                  "that disconnects mid-answer may end the process");
  }
  starting_.store(true);
  daemon_ = MHD_start_daemon(
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, nullptr, nullptr, &Callbacks::access,
      this, MHD_OPTION_EXTERNAL_LOGGER, static_cast<MHD_LogCallback>(&Callbacks::log), this,
      MHD_OPTION_LISTEN_SOCKET, handed, MHD_OPTION_THREAD_POOL_SIZE,
      static_cast<unsigned>(options_.threads),
      // 0: the system's default stack (glibc's, from RLIMIT_STACK), never a fixed small one.
      MHD_OPTION_THREAD_STACK_SIZE, static_cast<size_t>(0), MHD_OPTION_CONNECTION_TIMEOUT,
      static_cast<unsigned>(options_.connectionTimeoutS), MHD_OPTION_CONNECTION_LIMIT,
      static_cast<unsigned>(options_.maxConnections), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      kConnectionMemoryBytes, MHD_OPTION_URI_LOG_CALLBACK,
      static_cast<void* (*)(void*, const char*, MHD_Connection*)>(&Callbacks::begin), this,
      MHD_OPTION_NOTIFY_COMPLETED, static_cast<MHD_RequestCompletedCallback>(&Callbacks::completed),
      this, MHD_OPTION_END);
  starting_.store(false);
  ::close(fd);
  return daemon_ != nullptr;
}

MetricsServer::~MetricsServer() {
  // Closes every connection, those of stuck clients too, and joins the pool's threads.
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

ControlState MetricsServer::control() const { return endpoint_->control(); }

int MetricsServer::handleControl(const std::string& method, const std::string& authorization,
                                 const std::string& query, std::string* body) {
  return endpoint_->handleControl(method, authorization, query, body);
}

}  // namespace attnscope
