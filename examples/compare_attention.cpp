// Compares attention implementations through attnscope itself: naive attention (bmm, softmax,
// bmm), torch::nn::MultiheadAttention, and scaled-dot-product attention where the LibTorch has it,
// over sequence lengths and head counts, forward and backward. Each (implementation, length,
// heads) is one attnscope layer; the times and peak memory come from attnscope's statistics.
//
//   build/examples/compare_attention --seqs 128,256,512,1024,2048,4096 --heads 2,8 --html
//   /tmp/cmp.html
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/nn/modules/activation.h>

#include <ATen/ops/_scaled_dot_product_attention_math.h>
#include <ATen/ops/scaled_dot_product_attention.h>

#include "attnscope/MultiheadAttention.h"
#include "attnscope/attnscope.h"
#include "attnscope/core/Roofline.h"

namespace {

struct Options {
  std::vector<int64_t> seqs{128, 256, 512, 1024, 2048, 4096};
  std::vector<int64_t> heads{2, 8};
  // sdpa: what SDPA's dispatcher picks (the CPU flash kernel, dropout 0); sdpa_math: its math path.
  std::vector<std::string> impls{"naive", "mha", "sdpa", "sdpa_math"};
  int64_t dModel = 256;
  int64_t batch = 1;
  int64_t reps = 3;
  int64_t threads = 0;
  int64_t fitFrom = 1024;  // fit the exponent on lengths >= this
  std::string html;
  std::string json;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

int64_t intArg(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > hi) {
    throw std::invalid_argument(flag + "=\"" + v + "\": expected an integer from " +
                                std::to_string(lo) + " to " + std::to_string(hi));
  }
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout
          << "usage: compare_attention [--seqs 128,256,...] [--heads 2,8] [--impls "
             "naive,mha,sdpa,sdpa_math]\n"
             "                         [--d-model N] [--batch N] [--reps N] [--threads N]\n"
             "                         [--fit-from SEQ] [--html FILE] [--json FILE]\n"
             "Times forward and backward of each attention implementation per sequence length and\n"
             "head count through attnscope (one layer each), prints time and peak memory and the\n"
             "fitted exponent of time against sequence length (lengths >= --fit-from), and per\n"
             "phase the achieved GFLOP/s and GB/s, arithmetic intensity, bound and share of the\n"
             "roof against the ceilings calibrated at start (ATTNSCOPE_PEAK_FLOPS/_BANDWIDTH).\n";
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + ": missing value (or unknown flag)");
    const std::string v = argv[++i];
    if (flag == "--seqs") {
      o.seqs.clear();
      for (const auto& s : split(v)) o.seqs.push_back(intArg(flag, s, 1, 65536));
    } else if (flag == "--heads") {
      o.heads.clear();
      for (const auto& s : split(v)) o.heads.push_back(intArg(flag, s, 1, 256));
    } else if (flag == "--impls") {
      o.impls = split(v);
      for (const auto& s : o.impls) {
        if (s != "naive" && s != "mha" && s != "sdpa" && s != "sdpa_math") {
          throw std::invalid_argument(
              "--impls: \"" + s +
              "\" is not an implementation; allowed: naive, mha, sdpa, sdpa_math");
        }
      }
    } else if (flag == "--d-model")
      o.dModel = intArg(flag, v, 8, 16384);
    else if (flag == "--batch")
      o.batch = intArg(flag, v, 1, 4096);
    else if (flag == "--reps")
      o.reps = intArg(flag, v, 1, 1000);
    else if (flag == "--threads")
      o.threads = intArg(flag, v, 0, 1024);
    else if (flag == "--fit-from")
      o.fitFrom = intArg(flag, v, 1, 65536);
    else if (flag == "--html")
      o.html = v;
    else if (flag == "--json")
      o.json = v;
    else
      throw std::invalid_argument("unknown flag " + flag + " (see --help)");
  }
  for (int64_t h : o.heads) {
    if (o.dModel % h != 0) {
      throw std::invalid_argument("--d-model " + std::to_string(o.dModel) +
                                  " is not divisible by --heads " + std::to_string(h));
    }
  }
  return o;
}

std::string layerName(const std::string& impl, int64_t seq, int64_t heads) {
  return impl + "/s" + std::to_string(seq) + "/h" + std::to_string(heads);
}

// One forward and backward of the implementation; the scope (or the MHA wrapper) names the layer.
void runOnce(const std::string& impl, const std::string& name, int64_t seq, int64_t heads,
             const Options& o, attnscope::MultiheadAttention* mha) {
  const int64_t dh = o.dModel / heads;
  torch::Tensor out;
  std::vector<torch::Tensor> leaves;
  if (impl == "mha") {
    auto x = torch::randn({seq, o.batch, o.dModel}, torch::requires_grad());
    leaves.push_back(x);
    out = std::get<0>((*mha)->forward(x, x, x, {}, /*needWeights=*/false));
  } else {
    auto q = torch::randn({o.batch * heads, seq, dh}, torch::requires_grad());
    auto k = torch::randn({o.batch * heads, seq, dh}, torch::requires_grad());
    auto v = torch::randn({o.batch * heads, seq, dh}, torch::requires_grad());
    leaves = {q, k, v};
    attnscope::AttentionScope scope(name);
    if (impl == "naive") {
      auto scores = torch::bmm(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(dh));
      out = torch::bmm(torch::softmax(scores, -1), v);
    } else {
      auto q4 = q.view({o.batch, heads, seq, dh}), k4 = k.view({o.batch, heads, seq, dh}),
           v4 = v.view({o.batch, heads, seq, dh});
      out = impl == "sdpa" ? at::scaled_dot_product_attention(q4, k4, v4)
                           : std::get<0>(at::_scaled_dot_product_attention_math(q4, k4, v4));
    }
  }
  out.sum().backward();
}

struct Row {
  std::string impl;
  std::string backend;  // the fused kernel's backend attnscope named (flash, math, ...), or "-"
  int64_t seq = 0, heads = 0;
  double fwd = 0, bwd = 0;  // fastest call of the reps, seconds
  double fwdMean = 0, bwdMean = 0;
  int64_t fwdPeak = 0, bwdPeak = 0;  // peak live bytes above the call's start
  // Roofline (docs/ROOFLINE.md): every op kind of the phase summed, all reps.
  attnscope::RooflinePoint fwdRoof, bwdRoof;
};

// The phase's op kinds summed and placed against the ceilings.
attnscope::RooflinePoint phaseRoofline(const attnscope::PhaseStats& phase,
                                       const attnscope::Ceilings& ceilings) {
  double flops = 0, bytes = 0, seconds = 0;
  for (const auto& kind : phase.kinds) {
    if (!kind) continue;
    flops += kind->flops;
    bytes += kind->moved;
    seconds += kind->modelledSeconds;
  }
  return attnscope::rooflinePoint(flops, bytes, seconds, ceilings);
}

std::string roofCell(const attnscope::RooflinePoint& p) {
  if (p.bound == attnscope::Bound::kUnknown) return "-";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s %.0f%%", p.bound == attnscope::Bound::kMemory ? "mem" : "cmp",
                p.fraction * 100);
  return buf;
}

// Least-squares slope of log(value) on log(seq).
template <typename Value>
double exponent(const std::vector<Row>& rows, const std::string& impl, int64_t heads, int64_t from,
                Value value, int* points) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (const Row& r : rows) {
    if (r.impl != impl || r.heads != heads || r.seq < from || !(value(r) > 0)) continue;
    const double x = std::log(static_cast<double>(r.seq)), y = std::log(value(r));
    sx += x, sy += y, sxx += x * x, sxy += x * y, ++n;
  }
  *points = n;
  if (n < 2) return NAN;
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

const char* implColor(const std::string& impl) {
  return impl == "naive"  ? "#d62728"
         : impl == "mha"  ? "#1f77b4"
         : impl == "sdpa" ? "#2ca02c"
                          : "#9467bd";
}

// A log-log plot of value(row) against seq, one line per (impl, heads).
template <typename Value>
std::string plot(const std::vector<Row>& rows, const Options& o, const std::string& title,
                 Value value, const char* unit) {
  double lo = INFINITY, hi = 0;
  for (const Row& r : rows) {
    const double v = value(r);
    if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (!(hi > 0)) return "";
  const double ylo = std::floor(std::log10(lo)),
               yhi = std::ceil(std::log10(hi)) + (lo == hi ? 1 : 0);
  const double xlo =
      std::log2(static_cast<double>(*std::min_element(o.seqs.begin(), o.seqs.end())));
  double xhi = std::log2(static_cast<double>(*std::max_element(o.seqs.begin(), o.seqs.end())));
  if (xhi <= xlo) xhi = xlo + 1;
  const int left = 70, top = 24, w = 420, h = 260;
  const auto X = [&](double seq) { return left + w * (std::log2(seq) - xlo) / (xhi - xlo); };
  const auto Y = [&](double v) { return top + h * (1 - (std::log10(v) - ylo) / (yhi - ylo)); };
  std::ostringstream s;
  s << "<svg width=\"" << left + w + 170 << "\" height=\"" << top + h + 40
    << "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"" << title << "\">\n"
    << "<text x=\"" << left << "\" y=\"14\" class=\"t\">" << title << "</text>\n";
  for (double e = ylo; e <= yhi; e += 1) {
    s << "<line x1=\"" << left << "\" x2=\"" << left + w << "\" y1=\"" << Y(std::pow(10, e))
      << "\" y2=\"" << Y(std::pow(10, e)) << "\" stroke=\"#ddd\"/><text x=\"" << left - 5
      << "\" y=\"" << Y(std::pow(10, e)) + 4 << "\" text-anchor=\"end\" class=\"l\">1e"
      << static_cast<int>(e) << " " << unit << "</text>\n";
  }
  for (int64_t seq : o.seqs) {
    s << "<text x=\"" << X(seq) << "\" y=\"" << top + h + 16
      << "\" text-anchor=\"middle\" class=\"l\">" << seq << "</text>\n";
  }
  int legend = 0;
  for (const std::string& impl : o.impls) {
    for (int64_t heads : o.heads) {
      std::string points;
      for (const Row& r : rows) {
        if (r.impl == impl && r.heads == heads && value(r) > 0) {
          points += fmt("%.1f", X(r.seq)) + "," + fmt("%.1f", Y(value(r))) + " ";
        }
      }
      if (points.empty()) continue;
      s << "<polyline points=\"" << points << "\" fill=\"none\" stroke=\"" << implColor(impl)
        << "\" stroke-width=\"2\"" << (heads == o.heads.front() ? "" : " stroke-dasharray=\"5 3\"")
        << "/>\n";
      s << "<line x1=\"" << left + w + 15 << "\" x2=\"" << left + w + 40 << "\" y1=\""
        << top + 10 + legend * 16 << "\" y2=\"" << top + 10 + legend * 16 << "\" stroke=\""
        << implColor(impl) << "\" stroke-width=\"2\""
        << (heads == o.heads.front() ? "" : " stroke-dasharray=\"5 3\"") << "/><text x=\""
        << left + w + 45 << "\" y=\"" << top + 14 + legend * 16 << "\" class=\"l\">" << impl << ", "
        << heads << " heads</text>\n";
      ++legend;
    }
  }
  s << "<text x=\"" << left + w / 2 << "\" y=\"" << top + h + 34
    << "\" text-anchor=\"middle\" class=\"l\">sequence length (log scale)</text>\n</svg>\n";
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
    attnscope::Config config = attnscope::Config::fromEnvironment();
    config.logLevel = attnscope::LogLevel::kWarn;
    config.sampleEvery = 1;
    attnscope::start(config);
  } catch (const std::invalid_argument& e) {
    std::cerr << "compare_attention: " << e.what() << "\n";
    return 2;
  }
  if (o.threads > 0) at::set_num_threads(static_cast<int>(o.threads));
  torch::manual_seed(0);
  std::cerr << "compare_attention: " << o.impls.size() << " implementations x " << o.seqs.size()
            << " lengths x " << o.heads.size() << " head counts, " << o.reps
            << " passes over every configuration (plus a warm-up pass), " << at::get_num_threads()
            << " threads; sdpa through at::scaled_dot_product_attention, sdpa_math "
            << "through at::_scaled_dot_product_attention_math\n";
  // Every configuration once per pass, a warm-up pass first: on a shared machine a burst of
  // load then hits one call of each configuration, not all calls of one, and the fastest call
  // of each configuration is taken.
  struct Config {
    std::string impl, name;
    int64_t seq, heads;
    attnscope::MultiheadAttention mha{nullptr}, warmMha{nullptr};
  };
  std::vector<Config> configs;
  for (const std::string& impl : o.impls) {
    for (int64_t heads : o.heads) {
      for (int64_t seq : o.seqs) {
        Config c{impl, layerName(impl, seq, heads), seq, heads};
        if (impl == "mha") {
          c.mha = attnscope::MultiheadAttention(
              c.name, torch::nn::MultiheadAttentionOptions(o.dModel, heads));
          c.warmMha = attnscope::MultiheadAttention(
              "warm-up", torch::nn::MultiheadAttentionOptions(o.dModel, heads));
        }
        configs.push_back(std::move(c));
      }
    }
  }
  for (int64_t pass = 0; pass <= o.reps; ++pass) {
    for (Config& c : configs) {
      runOnce(c.impl, pass == 0 ? "warm-up" : c.name, c.seq, c.heads, o,
              pass == 0 ? &c.warmMha : &c.mha);
      attnscope::step();
    }
    std::cerr << "  " << (pass == 0 ? std::string("warm-up pass") : "pass " + std::to_string(pass))
              << " done\n";
  }
  const attnscope::StatsTable stats = attnscope::statistics();
  const attnscope::Ceilings ceilings = attnscope::runInfo().ceilings;
  attnscope::stop();

  std::vector<Row> rows;
  for (const attnscope::LayerStats& l : stats.layers()) {
    if (l.name == "warm-up") continue;
    Row r;
    const size_t a = l.name.find('/'), b = l.name.find("/h");
    r.impl = l.name.substr(0, a);
    r.seq = std::stoll(l.name.substr(a + 2, b - a - 2));
    r.heads = std::stoll(l.name.substr(b + 2));
    if (const auto* f = l.phases[static_cast<int>(attnscope::Phase::kForward)].get()) {
      r.fwd = f->call.seconds.min();
      r.fwdMean = f->call.seconds.mean();
      r.fwdPeak = f->call.peak;
      r.fwdRoof = phaseRoofline(*f, ceilings);
      r.backend = "-";
      for (int b = 0; b < attnscope::kNumAttentionBackends; ++b) {
        if (f->backends[b] > 0)
          r.backend = attnscope::attentionBackendName(static_cast<attnscope::AttentionBackend>(b));
      }
    }
    if (const auto* bw = l.phases[static_cast<int>(attnscope::Phase::kBackward)].get()) {
      r.bwd = bw->call.seconds.min();
      r.bwdMean = bw->call.seconds.mean();
      r.bwdPeak = bw->call.peak;
      r.bwdRoof = phaseRoofline(*bw, ceilings);
    }
    rows.push_back(r);
  }

  std::ostringstream table;
  table << "impl       backend heads     seq    fwd (ms)    bwd (ms)  fwd+bwd (ms)   fwd peak "
           "(MiB)   bwd peak (MiB)"
           "   fwd GFLOP/s  fwd GB/s  fwd flop/B  fwd roof   bwd GFLOP/s  bwd roof\n";
  for (const Row& r : rows) {
    char line[320];
    std::snprintf(line, sizeof(line),
                  "%-10s %-7s %5lld %7lld %11.3f %11.3f %13.3f %16.1f %16.1f %13.2f %9.2f %11.1f "
                  "%9s %13.2f %9s\n",
                  r.impl.c_str(), r.backend.c_str(), static_cast<long long>(r.heads),
                  static_cast<long long>(r.seq), r.fwd * 1e3, r.bwd * 1e3, (r.fwd + r.bwd) * 1e3,
                  r.fwdPeak / 1048576.0, r.bwdPeak / 1048576.0, r.fwdRoof.flopsPerSecond * 1e-9,
                  r.fwdRoof.bytesPerSecond * 1e-9, r.fwdRoof.intensity, roofCell(r.fwdRoof).c_str(),
                  r.bwdRoof.flopsPerSecond * 1e-9, roofCell(r.bwdRoof).c_str());
    table << line;
  }
  table << "roof: the bound (mem: bandwidth, cmp: compute) and the share of the roof reached; "
           "ceilings "
        << (ceilings.known() ? fmt("%.1f", ceilings.peakFlopsPerSecond * 1e-9) + " GFLOP/s, " +
                                   fmt("%.1f", ceilings.peakBytesPerSecond * 1e-9) + " GB/s (" +
                                   ceilings.source + ")"
                             : std::string("unknown"))
        << "\n";
  table << "\nfitted exponent against sequence length (lengths >= " << o.fitFrom
        << "): fwd+bwd time, forward peak memory\n";
  std::ostringstream fits;
  for (const std::string& impl : o.impls) {
    for (int64_t heads : o.heads) {
      int points = 0;
      const double e = exponent(
          rows, impl, heads, o.fitFrom, [](const Row& r) { return r.fwd + r.bwd; }, &points);
      const double m = exponent(
          rows, impl, heads, o.fitFrom, [](const Row& r) { return double(r.fwdPeak); }, &points);
      char line[200];
      std::snprintf(line, sizeof(line), "  %-6s %3lld heads: time %s, memory %s (%d lengths)\n",
                    impl.c_str(), static_cast<long long>(heads),
                    std::isfinite(e) ? fmt("%.2f", e).c_str() : "n/a",
                    std::isfinite(m) ? fmt("%.2f", m).c_str() : "n/a", points);
      table << line;
      fits << (fits.tellp() > 0 ? ", " : "") << "{\"impl\": \"" << impl
           << "\", \"heads\": " << heads
           << ", \"exponent\": " << (std::isfinite(e) ? fmt("%.4f", e) : "null")
           << ", \"memory_exponent\": " << (std::isfinite(m) ? fmt("%.4f", m) : "null")
           << ", \"lengths\": " << points << "}";
    }
  }
  std::cout << table.str();

  if (!o.json.empty()) {
    std::ofstream j(o.json);
    j << "{\"schema\": \"attnscope.compare_attention/1\", \"d_model\": " << o.dModel
      << ", \"batch\": " << o.batch << ", \"reps\": " << o.reps << ", \"fit_from\": " << o.fitFrom
      << ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      j << (i ? ", " : "") << "{\"impl\": \"" << r.impl << "\", \"backend\": \"" << r.backend
        << "\", \"heads\": " << r.heads << ", \"seq\": " << r.seq
        << ", \"forward_seconds\": " << fmt("%.9g", r.fwd)
        << ", \"backward_seconds\": " << fmt("%.9g", r.bwd)
        << ", \"forward_mean_seconds\": " << fmt("%.9g", r.fwdMean)
        << ", \"backward_mean_seconds\": " << fmt("%.9g", r.bwdMean)
        << ", \"forward_peak_bytes\": " << r.fwdPeak << ", \"backward_peak_bytes\": " << r.bwdPeak;
      for (const auto& [phase, p] :
           {std::pair<const char*, const attnscope::RooflinePoint*>{"forward", &r.fwdRoof},
            {"backward", &r.bwdRoof}}) {
        j << ", \"" << phase << "_flops\": " << fmt("%.9g", p->flops) << ", \"" << phase
          << "_bytes\": " << fmt("%.9g", p->bytes) << ", \"" << phase
          << "_flops_per_second\": " << fmt("%.9g", p->flopsPerSecond) << ", \"" << phase
          << "_bytes_per_second\": " << fmt("%.9g", p->bytesPerSecond) << ", \"" << phase
          << "_intensity\": " << fmt("%.9g", p->intensity) << ", \"" << phase << "_bound\": \""
          << attnscope::boundName(p->bound) << "\", \"" << phase
          << "_fraction\": " << fmt("%.9g", p->fraction);
      }
      j << "}";
    }
    j << "], \"ceilings\": {\"peak_flops_per_second\": " << fmt("%.9g", ceilings.peakFlopsPerSecond)
      << ", \"peak_bytes_per_second\": " << fmt("%.9g", ceilings.peakBytesPerSecond)
      << ", \"source\": \"" << ceilings.source << "\"}, \"fits\": [" << fits.str() << "]}\n";
    if (!j) {
      std::cerr << "compare_attention: cannot write " << o.json << "\n";
      return 1;
    }
  }
  if (!o.html.empty()) {
    std::ofstream h(o.html);
    h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attention "
         "implementations</title>"
         "<style>body{font-family:system-ui,sans-serif;margin:20px}pre{font-size:13px}.t{font-size:"
         "14px;font-weight:bold}"
         ".l{font-size:11px}svg{display:inline-block;margin:6px}</style></head><body>\n"
      << "<h1>Attention implementations, measured by attnscope</h1>\n<p>d_model " << o.dModel
      << ", batch " << o.batch << ", fastest of " << o.reps << " calls; solid: " << o.heads.front()
      << " heads, dashed: other head counts.</p>\n"
      << plot(
             rows, o, "forward + backward time", [](const Row& r) { return (r.fwd + r.bwd) * 1e3; },
             "ms")
      << plot(
             rows, o, "peak memory (forward, above the call's start)",
             [](const Row& r) { return r.fwdPeak / 1048576.0; }, "MiB")
      << plot(
             rows, o, "achieved forward throughput (GFLOP/s)",
             [](const Row& r) { return r.fwdRoof.flopsPerSecond * 1e-9; }, "GFLOP/s")
      << "<pre>" << table.str() << "</pre>\n</body></html>\n";
    if (!h) {
      std::cerr << "compare_attention: cannot write " << o.html << "\n";
      return 1;
    }
  }
  return 0;
}
