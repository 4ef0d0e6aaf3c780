#include <ATen/ATen.h>

#include <cstdio>

#include "attnscope/attnscope.h"

int main() {
  attnscope::Config config;
  config.logLevel = attnscope::LogLevel::kWarn;
  attnscope::start(config);
  auto x = at::randn({4, 8});
  for (int i = 0; i < 2; ++i) {
    attnscope::AttentionScope scope("consumer.attn");
    at::softmax(x, -1);
  }
  attnscope::step();
  const attnscope::StatsTable stats = attnscope::statistics();
  const auto& forward = stats.layers().at(0).phases[0];
  std::printf("attnscope %s layers=%zu forward_calls=%llu\n", attnscope::version(),
              stats.layers().size(),
              static_cast<unsigned long long>(forward ? forward->call.seconds.count() : 0));
  attnscope::stop();
  return 0;
}
