#include "Machine.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include "attnscope/core/Log.h"

namespace attnscope {
namespace detail {
namespace {

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  }
  return "";
}

// The BLAS (or MKL) libraries loaded in the process, by resolved path: Debian's libblas.so.3 is an
// alternatives link, so the directory tells the implementation (openblas-pthread, blas, ...).
int findBlas(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::string*>(data);
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  std::string path(name);
  const std::string base = path.substr(path.find_last_of('/') + 1);
  if (base.find("blas") == std::string::npos && base.find("mkl") == std::string::npos &&
      base.find("blis") == std::string::npos) {
    return 0;
  }
  char resolved[PATH_MAX];
  if (::realpath(name, resolved) != nullptr) path = resolved;
  // The last two path components: "openblas-pthread/libblas.so.3".
  const size_t last = path.find_last_of('/');
  const size_t prev =
      last == std::string::npos || last == 0 ? std::string::npos : path.find_last_of('/', last - 1);
  const std::string shown = prev == std::string::npos ? path : path.substr(prev + 1);
  if (out->find(shown) == std::string::npos) {
    if (!out->empty()) *out += ", ";
    *out += shown;
  }
  return 0;
}

// The NVIDIA driver API, opened at run time (no context is created: cuInit and device queries).
void describeGpu(int localRank, MachineInfo* m) {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return;
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  using GetFn = int (*)(int*, int);
  using NameFn = int (*)(char*, int, int);
  using MemFn = int (*)(size_t*, int);
  using DriverFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
  auto get = reinterpret_cast<GetFn>(::dlsym(lib, "cuDeviceGet"));
  auto name = reinterpret_cast<NameFn>(::dlsym(lib, "cuDeviceGetName"));
  auto mem = reinterpret_cast<MemFn>(::dlsym(lib, "cuDeviceTotalMem_v2"));
  auto driver = reinterpret_cast<DriverFn>(::dlsym(lib, "cuDriverGetVersion"));
  int n = 0, device = 0, version = 0;
  if (init == nullptr || count == nullptr || get == nullptr || init(0) != 0 || count(&n) != 0 ||
      n <= 0 || get(&device, std::max(0, localRank) % n) != 0) {
    ::dlclose(lib);
    return;
  }
  char buf[256] = {};
  if (name != nullptr && name(buf, sizeof(buf) - 1, device) == 0) m->gpuName = buf;
  size_t bytes = 0;
  if (mem != nullptr && mem(&bytes, device) == 0) m->gpuMemoryBytes = static_cast<int64_t>(bytes);
  if (driver != nullptr && driver(&version) == 0) {
    m->gpuDriver =
        "CUDA " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  }
  std::ifstream nv("/proc/driver/nvidia/version");  // "NVRM version: NVIDIA UNIX ... 550.54.15 ..."
  std::string line;
  if (std::getline(nv, line)) {
    std::istringstream words(line);
    std::string w;
    while (words >> w) {
      if (!w.empty() && std::isdigit(static_cast<unsigned char>(w[0])) &&
          w.find('.') != std::string::npos) {
        m->gpuDriver = w + (m->gpuDriver.empty() ? "" : " (" + m->gpuDriver + ")");
        break;
      }
    }
  }
  ::dlclose(lib);
}

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best time of `reps` runs of fn after one warm-up run.
template <typename Fn>
double bestOf(int reps, Fn fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = seconds();
    fn();
    best = std::min(best, seconds() - t0);
  }
  return best;
}

struct Measured {
  double flops = 0, bytes = 0;
  std::string detail;
  int threads = -1;
};

Measured measureHost() {
  Measured m;
  m.threads = at::get_num_threads();
  const int64_t n = 1024;
  const at::Tensor a = at::randn({n, n});
  const at::Tensor b = at::randn({n, n});
  at::Tensor c = at::empty({n, n});
  const double mm = bestOf(4, [&] { at::mm_out(c, a, b); });
  m.flops = 2.0 * n * n * n / mm;
  const int64_t elems = (64 << 20) / 4;  // 64 MiB of float32, beyond the caches
  const at::Tensor src = at::rand({elems});
  at::Tensor dst = at::empty({elems});
  const double copy = bestOf(5, [&] { dst.copy_(src); });
  m.bytes = 2.0 * elems * 4 / copy;  // read and write
  std::ostringstream d;
  d << "float32 mm " << n << "x" << n << " best of 4 (" << mm * 1e3
    << " ms), copy of 64 MiB best of 5 (" << copy * 1e3 << " ms), " << m.threads << " thread"
    << (m.threads == 1 ? "" : "s");
  m.detail = d.str();
  return m;
}

}  // namespace

MachineInfo describeMachine(int localRank) {
  MachineInfo m;
  m.cpuModel = cpuModel();
  m.cpuCores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  m.threads = at::get_num_threads();
  ::dl_iterate_phdr(&findBlas, &m.blas);
  describeGpu(localRank, &m);
  return m;
}

Ceilings machineCeilings(const Config& config, bool deviceTiming) {
  Ceilings c;
  c.peakFlopsPerSecond = config.peakFlops;
  c.peakBytesPerSecond = config.peakBandwidth;
  const bool needFlops = c.peakFlopsPerSecond <= 0, needBytes = c.peakBytesPerSecond <= 0;
  if (!needFlops && !needBytes) {
    c.source = "config";
    c.detail = "ATTNSCOPE_PEAK_FLOPS and ATTNSCOPE_PEAK_BANDWIDTH";
    return c;
  }
  if (!config.calibrate || deviceTiming) {
    if (!needFlops || !needBytes) c.source = "config";
    c.peakFlopsPerSecond = needFlops ? 0 : c.peakFlopsPerSecond;
    c.peakBytesPerSecond = needBytes ? 0 : c.peakBytesPerSecond;
    c.detail = deviceTiming ? "device timing: set ATTNSCOPE_PEAK_FLOPS and "
                              "ATTNSCOPE_PEAK_BANDWIDTH to the device's ceilings"
                            : "calibration off (ATTNSCOPE_CALIBRATE=0)";
    ATTNSCOPE_LOG(
        kInfo, "roofline ceilings " << (c.known() ? "configured" : "unknown") << ": " << c.detail);
    return c;
  }
  // Once per process and thread count: a restarted session keeps the first measurement.
  static std::mutex mutex;
  static Measured cached;
  Measured m;
  const double t0 = seconds();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (cached.threads != at::get_num_threads()) {
      try {
        cached = measureHost();
      } catch (const std::exception& e) {
        ATTNSCOPE_LOG(kWarn, "roofline calibration failed (" << e.what() << "); ceilings unknown");
        cached = Measured{};
        cached.threads = at::get_num_threads();
      }
    }
    m = cached;
  }
  if (needFlops) c.peakFlopsPerSecond = m.flops;
  if (needBytes) c.peakBytesPerSecond = m.bytes;
  c.source = (needFlops && needBytes) ? "calibration" : "config+calibration";
  c.detail = m.detail;
  ATTNSCOPE_LOG(kInfo, "roofline ceilings (" << c.source << "): " << c.peakFlopsPerSecond * 1e-9
                                             << " GFLOP/s, " << c.peakBytesPerSecond * 1e-9
                                             << " GB/s; " << c.detail << "; took " << seconds() - t0
                                             << " s");
  return c;
}

}  // namespace detail
}  // namespace attnscope
