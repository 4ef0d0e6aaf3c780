// The endpoint's answers without sockets (exporters/src/MetricsEndpoint.h): every route, status
// code, header and body text, and every bad request, from the request as libmicrohttpd frames it.
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "MetricsEndpoint.h"

namespace attnscope {
namespace detail {
namespace {

std::shared_ptr<MetricsSnapshot> oneCounter() {
  prometheus::ClientMetric m;
  m.counter.value = 7;
  prometheus::MetricFamily f{
      "attnscope_test_total", "a test counter", prometheus::MetricType::Counter, {m}};
  auto snapshot = std::make_shared<MetricsSnapshot>();
  snapshot->publish({f});
  return snapshot;
}

HttpRequest request(const std::string& method, const std::string& target,
                    const std::string& authorization = "", const std::string& body = "") {
  HttpRequest r;
  r.method = method;
  r.target = target;
  r.authorization = authorization;
  r.body = body;
  r.headerBytes = method.size() + target.size() + 40;
  return r;
}

const char kBearer[] = "Bearer the-control-token";
const char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";

TEST(MetricsEndpointTest, MetricsAreServedForGetAndHeadOnly) {
  MetricsEndpoint endpoint("", "", 1, oneCounter());
  const HttpResponse get = endpoint.handle(request("GET", "/metrics"));
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(get.contentType, kMetricsType);
  EXPECT_NE(get.body.find("attnscope_test_total 7"), std::string::npos);
  EXPECT_EQ(get.wwwAuthenticate, "");
  // A query does not change the route.
  EXPECT_EQ(endpoint.handle(request("GET", "/metrics?x=1")).status, 200);
  const HttpResponse head = endpoint.handle(request("HEAD", "/metrics"));
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  const HttpResponse post = endpoint.handle(request("POST", "/metrics"));
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.contentType, "text/plain");
  EXPECT_EQ(post.body, "method POST is not allowed; allowed: GET\n");
  EXPECT_EQ(endpoint.handle(request("BREW", "/metrics")).body,
            "method BREW is not allowed; allowed: GET\n");
}

TEST(MetricsEndpointTest, RootAndUnknownPaths) {
  MetricsEndpoint endpoint("", "", 1, oneCounter());
  const HttpResponse root = endpoint.handle(request("GET", "/"));
  EXPECT_EQ(root.status, 200);
  EXPECT_EQ(root.body, "attnscope: metrics at /metrics\n");
  for (const char* target :
       {"/nothing-here", "/../etc/passwd", "/metrics/../etc/passwd", "/%2e%2e/etc/passwd",
        "metrics", "", "*", "/metrics%3F", "//metrics"}) {
    const HttpResponse r = endpoint.handle(request("GET", target));
    EXPECT_EQ(r.status, 404) << target;
    EXPECT_EQ(r.contentType, "text/plain") << target;
    EXPECT_EQ(r.body, "not found; try /metrics\n") << target;
  }
}

TEST(MetricsEndpointTest, BasicAuthOnMetrics) {
  MetricsEndpoint endpoint("prom:s3cret", "", 1, oneCounter());
  for (const char* authorization :
       {"", "Basic cHJvbTp3cm9uZw==" /* prom:wrong */, "Bearer cHJvbTpzM2NyZXQ=", "Basic",
        "Basic cHJvbTpzM2NyZX" /* prom:s3cre */, "Basic !!!!"}) {
    const HttpResponse r = endpoint.handle(request("GET", "/metrics", authorization));
    EXPECT_EQ(r.status, 401) << authorization;
    EXPECT_EQ(r.body, "credentials required (HTTP basic auth)\n");
    EXPECT_EQ(r.wwwAuthenticate, "Basic realm=\"attnscope\"");
  }
  EXPECT_EQ(endpoint.handle(request("GET", "/metrics", "Basic cHJvbTpzM2NyZXQ=")).status, 200);
  EXPECT_EQ(endpoint.handle(request("GET", "/metrics", "basic cHJvbTpzM2NyZXQ=")).status, 200);
  // Padding is optional, as it was.
  EXPECT_EQ(endpoint.handle(request("GET", "/metrics", "Basic cHJvbTpzM2NyZXQ")).status, 200);
  // Long garbage decodes without overflow and is refused.
  EXPECT_EQ(endpoint.handle(request("GET", "/metrics", "Basic " + std::string(10000, 'z'))).status,
            401);
}

TEST(MetricsEndpointTest, ControlIsOffWithoutAToken) {
  MetricsEndpoint endpoint("", "", 1, oneCounter());
  for (const char* method : {"GET", "POST", "DELETE"}) {
    const HttpResponse r = endpoint.handle(request(method, "/control", kBearer, "action=pause"));
    EXPECT_EQ(r.status, 404);
    EXPECT_EQ(r.contentType, "application/json");
    EXPECT_EQ(r.body,
              "{\"error\": \"runtime control is off; set ATTNSCOPE_CONTROL_TOKEN to enable it\"}");
  }
}

TEST(MetricsEndpointTest, ControlNeedsTheToken) {
  MetricsEndpoint endpoint("", "the-control-token", 1, oneCounter());
  for (const char* authorization : {"", "Bearer wrong", "Bearer the-control-token ",
                                    "bearer the-control-token", "Basic the-control-token"}) {
    const HttpResponse r = endpoint.handle(request("POST", "/control", authorization, "a=b"));
    EXPECT_EQ(r.status, 401) << authorization;
    EXPECT_EQ(r.contentType, "application/json");
    EXPECT_EQ(r.wwwAuthenticate, "Bearer realm=\"attnscope\"");
    EXPECT_EQ(r.body,
              "{\"error\": \"missing or wrong bearer token (Authorization: Bearer "
              "<ATTNSCOPE_CONTROL_TOKEN>)\"}");
  }
  EXPECT_EQ(endpoint.control().generation, 0u);
}

TEST(MetricsEndpointTest, ControlRequestsFromQueryAndFormBody) {
  MetricsEndpoint endpoint("", "the-control-token", 1, oneCounter());
  const HttpResponse get = endpoint.handle(request("GET", "/control", kBearer));
  EXPECT_EQ(get.status, 200);
  // The state, with the series the endpoint serves now (oneCounter: 1).
  EXPECT_EQ(get.body,
            "{\"generation\": 0, \"paused\": false, \"sample_every\": 1, \"applies\": \"at the "
            "next aggregation round\", \"layers\": false, \"series\": 1, \"layers_apply\": \"to "
            "this rank's endpoint at the next reporting interval\"}");
  const HttpResponse paused = endpoint.handle(request("POST", "/control", kBearer, "action=pause"));
  EXPECT_EQ(paused.status, 200);
  EXPECT_EQ(paused.body,
            "{\"generation\": 1, \"paused\": true, \"sample_every\": 1, \"applies\": \"at the "
            "next aggregation round\", \"layers\": false, \"series\": 1, \"layers_apply\": \"to "
            "this rank's endpoint at the next reporting interval\"}");
  EXPECT_EQ(endpoint.handle(request("POST", "/control?sample_every=8", kBearer)).status, 200);
  // Query and body together: the body's fields follow the query's.
  EXPECT_EQ(
      endpoint.handle(request("POST", "/control?action=resume", kBearer, "sample_every=3")).status,
      200);
  const ControlState s = endpoint.control();
  EXPECT_EQ(s.generation, 3u);
  EXPECT_FALSE(s.paused);
  EXPECT_EQ(s.sampleEvery, 3);
}

TEST(MetricsEndpointTest, BadControlRequestsGetTheirExactError) {
  MetricsEndpoint endpoint("", "the-control-token", 1, oneCounter());
  const std::string allowed =
      " not understood; allowed: action=pause, action=resume, sample_every=<1..1000000>, "
      "layers=on|off\"}";
  for (const char* body :
       {"sample_every=0", "sample_every=1000001", "sample_every=lots", "sample_every=-1",
        "sample_every=", "action=stop", "action", "x=1", "action=pause&x=1",
        "sample_every=99999999999999999999999", "layers=yes", "layers"}) {
    const HttpResponse r = endpoint.handle(request("POST", "/control", kBearer, body));
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(r.contentType, "application/json");
    EXPECT_EQ(r.body, "{\"error\": \"request '" + std::string(body) + "'" + allowed) << body;
  }
  const HttpResponse empty = endpoint.handle(request("POST", "/control", kBearer));
  EXPECT_EQ(empty.status, 400);
  EXPECT_EQ(empty.body, "{\"error\": \"request ''" + allowed);
  const HttpResponse del = endpoint.handle(request("DELETE", "/control", kBearer));
  EXPECT_EQ(del.status, 405);
  EXPECT_EQ(del.body, "{\"error\": \"method DELETE is not allowed; allowed: GET, POST\"}");
  EXPECT_EQ(endpoint.control().generation, 0u);
}

TEST(MetricsEndpointTest, SizeLimits) {
  MetricsEndpoint endpoint("", "the-control-token", 1, oneCounter());
  HttpRequest big = request("GET", "/metrics");
  big.headerBytes = MetricsEndpoint::kMaxHeaderBytes + 1;
  const HttpResponse headers = endpoint.handle(big);
  EXPECT_EQ(headers.status, 413);
  EXPECT_EQ(headers.contentType, "text/plain");
  EXPECT_EQ(headers.body, "request headers too large\n");
  big.headerBytes = MetricsEndpoint::kMaxHeaderBytes;
  EXPECT_EQ(endpoint.handle(big).status, 200);

  HttpRequest body = request("POST", "/control", kBearer);
  body.bodyTooLarge = true;
  const HttpResponse r = endpoint.handle(body);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.contentType, "text/plain");
  EXPECT_EQ(r.body, "body too large\n");
  // /metrics ignores a body, however large; /control off answers 404 before looking at it.
  HttpRequest scrape = request("GET", "/metrics");
  scrape.bodyTooLarge = true;
  EXPECT_EQ(endpoint.handle(scrape).status, 200);
  MetricsEndpoint off("", "", 1, oneCounter());
  EXPECT_EQ(off.handle(body).status, 404);
}

}  // namespace
}  // namespace detail
}  // namespace attnscope
