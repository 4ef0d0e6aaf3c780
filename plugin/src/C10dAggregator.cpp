#include "C10dAggregator.h"

#include <cstdlib>
#include <cstring>

#include <ATen/Functions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#if ATTNSCOPE_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
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

#if ATTNSCOPE_WITH_GLOO
std::unique_ptr<Aggregator> C10dAggregator::gloo(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                 int worldSize, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  options->threads = 1;
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("group/", store), rank, worldSize, options);
  return std::make_unique<C10dAggregator>("gloo", std::move(store), std::move(group), worldSize,
                                          c10::Device(c10::DeviceType::CPU), timeout);
}
#endif

#if ATTNSCOPE_WITH_NCCL
std::unique_ptr<Aggregator> C10dAggregator::nccl(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                 int worldSize, int localRank,
                                                 std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(
      c10::make_intrusive<c10d::PrefixStore>("group/", store), rank, worldSize, options);
  return std::make_unique<C10dAggregator>(
      "nccl", std::move(store), std::move(group), worldSize,
      c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(localRank)), timeout);
}
#endif

C10dAggregator::C10dAggregator(const char* name, c10::intrusive_ptr<c10d::Store> store,
                               c10::intrusive_ptr<C10dGroup> group, int worldSize,
                               c10::Device device, std::chrono::milliseconds timeout)
    : name_(name),
      store_(std::move(store)),
      group_(std::move(group)),
      worldSize_(worldSize),
      device_(device),
      timeout_(timeout) {}

bool C10dAggregator::allGather(const std::vector<double>& mine, std::vector<double>* all,
                               std::string* error) {
  try {
    const ReporterStream stream(device_);
    const auto n = static_cast<int64_t>(mine.size());
    std::vector<at::Tensor> input{toDevice(mine.data(), n, device_)};
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < worldSize_; ++r) {
      output[0].push_back(at::empty({n}, at::TensorOptions().dtype(at::kDouble).device(device_)));
    }
    group_->allgather(output, input)->wait(timeout_);
    all->resize(mine.size() * static_cast<size_t>(worldSize_));
    for (int r = 0; r < worldSize_; ++r) toHost(output[0][r], all->data() + r * n);
    return true;
  } catch (const std::exception& e) {
    healthy_ = false;
    *error = std::string(name_) + " all-gather failed: " + firstLine(e.what());
    return false;
  }
}

bool C10dAggregator::allReduceSum(std::vector<double>* values, std::string* error) {
  try {
    const ReporterStream stream(device_);
    const auto n = static_cast<int64_t>(values->size());
    std::vector<at::Tensor> tensors{toDevice(values->data(), n, device_)};
    group_->allreduce(tensors)->wait(timeout_);
    toHost(tensors[0], values->data());
    return true;
  } catch (const std::exception& e) {
    healthy_ = false;
    *error = std::string(name_) + " all-reduce failed: " + firstLine(e.what());
    return false;
  }
}

}  // namespace detail
}  // namespace attnscope
