#include "GlooAggregator.h"

#include <cstdlib>
#include <cstring>

#include <ATen/Functions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

namespace attnscope {
namespace detail {
namespace {

// c10::Error texts carry a backtrace after the first line.
std::string firstLine(const char* what) {
  std::string s(what);
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

GlooAggregator::GlooAggregator(c10::intrusive_ptr<c10d::Store> store, int rank, int worldSize,
                               std::chrono::milliseconds timeout)
    : store_(std::move(store)), worldSize_(worldSize), timeout_(timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  options->threads = 1;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("group/", store_);
  group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, worldSize, options);
}

bool GlooAggregator::allGather(const std::vector<double>& mine, std::vector<double>* all,
                               std::string* error) {
  try {
    const auto n = static_cast<int64_t>(mine.size());
    std::vector<at::Tensor> input{at::from_blob(const_cast<double*>(mine.data()), {n}, at::kDouble).clone()};
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < worldSize_; ++r) output[0].push_back(at::empty({n}, at::kDouble));
    group_->allgather(output, input)->wait(timeout_);
    all->resize(mine.size() * static_cast<size_t>(worldSize_));
    for (int r = 0; r < worldSize_; ++r) {
      std::memcpy(all->data() + r * n, output[0][r].data_ptr<double>(), n * sizeof(double));
    }
    return true;
  } catch (const std::exception& e) {
    healthy_ = false;
    *error = "gloo all-gather failed: " + firstLine(e.what());
    return false;
  }
}

bool GlooAggregator::allReduceSum(std::vector<double>* values, std::string* error) {
  try {
    const auto n = static_cast<int64_t>(values->size());
    std::vector<at::Tensor> tensors{at::from_blob(values->data(), {n}, at::kDouble).clone()};
    group_->allreduce(tensors)->wait(timeout_);
    std::memcpy(values->data(), tensors[0].data_ptr<double>(), n * sizeof(double));
    return true;
  } catch (const std::exception& e) {
    healthy_ = false;
    *error = "gloo all-reduce failed: " + firstLine(e.what());
    return false;
  }
}

}  // namespace detail
}  // namespace attnscope
