// Writes the fuzzer's seed corpus: a small real rank file with roofline rows (prefixed 0x00: a file
// image) and a few step records (prefixed 0x01).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "attnscope/trace/TraceStore.h"

using namespace attnscope;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: MakeSeeds CORPUS_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<TraceCall> calls;
  for (int l = 0; l < 2; ++l) {
    TraceCall c;
    c.layer = l;
    c.phase = l == 0 ? Phase::kForward : Phase::kBackward;
    c.calls = 1;
    c.ns = 123456;
    c.kinds[2].ns = 50000;
    c.kinds[2].bytes = 4096;
    calls.push_back(c);
  }
  std::string error;
  auto store = TraceStore::open(dir + "/work", 0, 1 << 20, &error);
  if (!store) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  TraceInterval in;
  in.meta = {
      {"format", "attnscope.trace/1"}, {"rank", "0"}, {"world_size", "2"}, {"interval_s", "1"}};
  in.layerNames = {"layers.0.attn", "layers.1.attn"};
  for (uint64_t s = 0; s < 4; ++s) {
    EncodedStep e;
    e.step = s;
    e.endUnix = 1000 + s;
    e.stepNs = 1000000;
    traceformat::encodeCalls(calls, &e.data);
    in.steps.push_back(e);
    std::ofstream(dir + "/record-" + std::to_string(s), std::ios::binary) << '\x01' << e.data;
    calls[0].calls += 1;
  }
  in.haveWindow = true;
  for (int k = 0; k < 3; ++k) {  // a few roofline cells, so the fuzzer starts from that table too
    TraceRooflineRow r;
    r.layer = k % 2;
    r.phase = k == 2 ? Phase::kBackward : Phase::kForward;
    r.kind = static_cast<OpKind>(k * 3);
    r.ops = 4;
    r.seconds = r.modelledSeconds = 0.001 * (k + 1);
    r.flops = k == 2 ? 0 : 1e7;
    r.bytes = 1e6;
    r.wideFlops = r.flops;
    in.roofline.push_back(r);
  }
  in.meta.emplace_back("peak_flops_per_second", "1e11");
  in.meta.emplace_back("peak_bytes_per_second", "2e10");
  if (!store->commit(in, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  const std::string path = store->path();
  store.reset();
  std::ifstream file(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << file.rdbuf();
  std::ofstream(dir + "/file-0", std::ios::binary) << '\x00' << bytes.str();
  std::remove(path.c_str());
  std::remove((dir + "/work").c_str());
  return 0;
}
