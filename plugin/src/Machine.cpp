#include "Machine.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include "attnscope/core/Log.h"
#include "attnscope/core/UnixTime.h"

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
  double measuredUnix = 0;  // when the measurement ran
  std::string origin;       // "this process" or "cache <path>"
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

// ---- The machine's ceilings cache
// ---------------------------------------------------------------- Host ceilings depend on the CPU,
// the BLAS, LibTorch and its thread count, not on the job, so they are measured once per machine:
// the first rank to need them measures under an exclusive lock (local ranks that start together
// wait for it instead of measuring at once, which made each measure a third of what the machine
// does), writes them to a file keyed by what decides them, and every later rank reads that file
// (about a millisecond). Entries expire after a week. A cache that cannot be used (no writable
// directory, a lock held past kLockWaitSeconds) is logged and the rank measures on its own, as
// before.
constexpr int kCacheFormat = 1;
constexpr double kCacheMaxAgeSeconds = 7 * 24 * 3600.0;
constexpr double kLockWaitSeconds = 20.0;

std::string cacheDirectory() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x == '/')
    return std::string(x) + "/attnscope";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h == '/')
    return std::string(h) + "/.cache/attnscope";
  return "/tmp/attnscope-" + std::to_string(::getuid());
}

bool makeDirectories(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string part = path.substr(0, slash);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    if (slash == std::string::npos) return true;
  }
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (const unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

std::string isoTime(double unix) {
  const std::time_t t = static_cast<std::time_t>(unix);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What decides the host ceilings: describeMachine()'s CPU, BLAS and threads, and LibTorch.
std::string cacheKey(const MachineInfo& machine) {
  return "cpu=" + machine.cpuModel + ";cpus=" + std::to_string(machine.cpuCores) +
         ";blas=" + machine.blas + ";threads=" + std::to_string(machine.threads) +
         ";torch=" + std::to_string(TORCH_VERSION_MAJOR) + "." +
         std::to_string(TORCH_VERSION_MINOR) + "." + std::to_string(TORCH_VERSION_PATCH);
}

bool readCache(const std::string& path, const std::string& key, Measured* out) {
  std::ifstream in(path);
  std::string line, k;
  int format = 0;
  Measured m;
  double measuredUnix = 0;
  if (!(in >> k >> format) || k != "attnscope-ceilings" || format != kCacheFormat) return false;
  std::getline(in, line);
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string name = line.substr(0, space), value = line.substr(space + 1);
    if (name == "key") k = value;
    if (name == "flops") m.flops = std::strtod(value.c_str(), nullptr);
    if (name == "bytes") m.bytes = std::strtod(value.c_str(), nullptr);
    if (name == "measured_unix") measuredUnix = std::strtod(value.c_str(), nullptr);
    if (name == "detail") m.detail = value;
  }
  const double age = unixNow() - measuredUnix;
  if (k != key || !(m.flops > 0) || !(m.bytes > 0) || !(age >= 0 && age < kCacheMaxAgeSeconds))
    return false;
  m.threads = out->threads;
  m.measuredUnix = measuredUnix;
  m.origin = "cache " + path;
  *out = m;
  return true;
}

bool writeCache(const std::string& path, const std::string& key, const Measured& m) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out.precision(17);
    out << "attnscope-ceilings " << kCacheFormat << "\nkey " << key << "\nflops " << m.flops
        << "\nbytes " << m.bytes << "\nmeasured_unix " << m.measuredUnix << "\ndetail " << m.detail
        << "\n";
    if (!out.flush()) {
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

// An exclusive lock on a file, waited for at most kLockWaitSeconds; released when destroyed.
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(lockFile(path)) {}
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  static int lockFile(const std::string& path);
  const int fd_;
};

int FileLock::lockFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  const double deadline = seconds() + kLockWaitSeconds;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || seconds() > deadline) {
      ::close(fd);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return fd;
}

Measured measureNow() {
  Measured m = measureHost();
  m.measuredUnix = unixNow();
  m.origin = "this process";
  return m;
}

// The host ceilings for `threads`: from the machine's cache, else measured (once at a time per
// machine) and cached.
Measured machineMeasurement(const MachineInfo& machine) {
  const std::string dir = cacheDirectory();
  const std::string key = cacheKey(machine);
  char name[40];
  std::snprintf(name, sizeof(name), "/ceilings-%016llx",
                static_cast<unsigned long long>(fnv1a(key)));
  const std::string path = dir + name;
  Measured m;
  m.threads = machine.threads;
  if (readCache(path, key, &m)) return m;
  if (!makeDirectories(dir)) {
    ATTNSCOPE_LOG(kInfo, "roofline ceilings cache: cannot create "
                             << dir << " (" << std::strerror(errno) << "); measuring in this rank");
    return measureNow();
  }
  const FileLock lock(path + ".lock");
  if (!lock.held()) {
    ATTNSCOPE_LOG(kWarn, "roofline ceilings cache: " << path << ".lock not taken within "
                                                     << kLockWaitSeconds
                                                     << " s; measuring in this rank");
    return measureNow();
  }
  // Another rank may have measured while this one waited for the lock.
  if (!readCache(path, key, &m)) {
    m = measureNow();
    if (!writeCache(path, key, m))
      ATTNSCOPE_LOG(kInfo, "roofline ceilings cache: " << path << " not written");
  }
  return m;  // the lock is released here
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

Ceilings machineCeilings(const Config& config, bool deviceTiming, const MachineInfo& machine) {
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
        cached = machineMeasurement(machine);
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
  c.detail = m.detail + "; measured " + isoTime(m.measuredUnix) + " (" + m.origin + ")";
  ATTNSCOPE_LOG(kInfo, "roofline ceilings (" << c.source << "): " << c.peakFlopsPerSecond * 1e-9
                                             << " GFLOP/s, " << c.peakBytesPerSecond * 1e-9
                                             << " GB/s; " << c.detail << "; took " << seconds() - t0
                                             << " s");
  return c;
}

}  // namespace detail
}  // namespace attnscope
