#include "C10dAggregator.h"

#include <cstdlib>
#include <cstring>

#include <ATen/Functions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#if ATTNSCOPE_WITH_NCCL
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <optional>
#endif

namespace attnscope {
namespace detail {
namespace {

// c10::Error texts carry a backtrace after the first line.
std::string firstLine(const char* what) {
  std::string s(what);
  return s.substr(0, s.find('\n'));
}

at::Tensor toDevice(const double* data, int64_t n, c10::Device device) {
  // from_blob does not own `data`: copy (to the device, or a CPU clone).
  const at::Tensor host = at::from_blob(const_cast<double*>(data), {n}, at::kDouble);
  return device.is_cpu() ? host.clone() : host.to(device);
}

void toHost(const at::Tensor& t, double* out) {
  const at::Tensor host = t.device().is_cpu() ? t : t.cpu();
  std::memcpy(out, host.data_ptr<double>(), host.numel() * sizeof(double));
}

// On a CUDA device the reporter's copies and its wait on NCCL's stream go to a stream of the
// pool (non-blocking), never to the device's default stream, which is usually the training
// stream: a copy or a wait there would serialise with the training work.
class ReporterStream {
 public:
  explicit ReporterStream(c10::Device device) {
#if ATTNSCOPE_WITH_NCCL
    if (device.is_cuda()) guard_.emplace(c10::cuda::getStreamFromPool(false, device.index()));
#else
    (void)device;
#endif
  }

 private:
#if ATTNSCOPE_WITH_NCCL
  std::optional<c10::cuda::CUDAStreamGuard> guard_;
#endif
};

}  // namespace

std::unique_ptr<Aggregator> C10dAggregator::group(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                  c10::intrusive_ptr<c10d::Store> store,
                                                  int localRank,
                                                  std::chrono::milliseconds timeout) {
  std::string name = group->getBackendName();
  const c10::Device device =
      name == "nccl" ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(localRank))
                     : c10::Device(c10::DeviceType::CPU);
  const int worldSize = group->getSize();
  return std::unique_ptr<Aggregator>(new C10dAggregator(
      std::move(name), std::move(store), std::move(group), nullptr, worldSize, device, timeout));
}

#if ATTNSCOPE_WITH_NCCL
std::unique_ptr<Aggregator> C10dAggregator::nccl(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                 int worldSize, int localRank,
                                                 std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(
      c10::make_intrusive<c10d::PrefixStore>("group/", store), rank, worldSize, options);
  return std::unique_ptr<Aggregator>(new C10dAggregator(
      "nccl", std::move(store), nullptr, std::move(backend), worldSize,
      c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(localRank)), timeout));
}
#endif

C10dAggregator::C10dAggregator(std::string name, c10::intrusive_ptr<c10d::Store> store,
                               c10::intrusive_ptr<c10d::ProcessGroup> group,
                               c10::intrusive_ptr<c10d::Backend> backend, int worldSize,
                               c10::Device device, std::chrono::milliseconds timeout)
    : name_(std::move(name)),
      store_(std::move(store)),
      group_(std::move(group)),
      backend_(std::move(backend)),
      worldSize_(worldSize),
      device_(device),
      timeout_(timeout) {}

template <class Group>
bool C10dAggregator::collective(Group& group, const std::vector<double>& mine,
                                std::vector<double>* out, bool gather, std::string* error) {
  try {
    const ReporterStream stream(device_);
    const auto n = static_cast<int64_t>(mine.size());
    std::vector<at::Tensor> input{toDevice(mine.data(), n, device_)};
    if (!gather) {
      group.allreduce(input)->wait(timeout_);
      out->resize(mine.size());
      toHost(input[0], out->data());
      return true;
    }
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < worldSize_; ++r) {
      output[0].push_back(at::empty({n}, at::TensorOptions().dtype(at::kDouble).device(device_)));
    }
    group.allgather(output, input)->wait(timeout_);
    out->resize(mine.size() * static_cast<size_t>(worldSize_));
    for (int r = 0; r < worldSize_; ++r) toHost(output[0][r], out->data() + r * n);
    return true;
  } catch (const std::exception& e) {
    healthy_ = false;
    *error = name_ + (gather ? " all-gather" : " all-reduce") + " failed: " + firstLine(e.what());
    return false;
  }
}

bool C10dAggregator::allGather(const std::vector<double>& mine, std::vector<double>* all,
                               std::string* error) {
  return group_ ? collective(*group_, mine, all, true, error)
                : collective(*backend_, mine, all, true, error);
}

bool C10dAggregator::allReduceSum(std::vector<double>* values, std::string* error) {
  std::vector<double> sum;
  const bool ok = group_ ? collective(*group_, *values, &sum, false, error)
                         : collective(*backend_, *values, &sum, false, error);
  if (ok) *values = std::move(sum);
  return ok;
}

}  // namespace detail
}  // namespace attnscope
