#include "NcclAggregator.h"

#include <cstring>

#include <ATen/Functions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

namespace attnscope {
namespace detail {
namespace {

std::string firstLine(const char* what) {
  std::string s(what);
  return s.substr(0, s.find('\n'));
}

}  // namespace

NcclAggregator::NcclAggregator(c10::intrusive_ptr<c10d::Store> store, int rank, int worldSize,
                               int localRank, std::chrono::milliseconds timeout)
    : store_(std::move(store)),
      worldSize_(worldSize),
      device_(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(localRank)),
      timeout_(timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("group/", store_);
  group_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, worldSize, options);
}

bool NcclAggregator::allGather(const std::vector<double>& mine, std::vector<double>* all,
                               std::string* error) {
  try {
    const auto n = static_cast<int64_t>(mine.size());
    const auto onDevice = at::TensorOptions().dtype(at::kDouble).device(device_);
    std::vector<at::Tensor> input{
        at::from_blob(const_cast<double*>(mine.data()), {n}, at::kDouble).to(device_)};
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < worldSize_; ++r) output[0].push_back(at::empty({n}, onDevice));
    group_->allgather(output, input)->wait(timeout_);
    all->resize(mine.size() * static_cast<size_t>(worldSize_));
    for (int r = 0; r < worldSize_; ++r) {
      const at::Tensor host = output[0][r].cpu();
      std::memcpy(all->data() + r * n, host.data_ptr<double>(), n * sizeof(double));
    }
    return true;
  } catch (const std::exception& e) {
    healthy_ = false;
    *error = "nccl all-gather failed: " + firstLine(e.what());
    return false;
  }
}

bool NcclAggregator::allReduceSum(std::vector<double>* values, std::string* error) {
  try {
    const auto n = static_cast<int64_t>(values->size());
    std::vector<at::Tensor> tensors{at::from_blob(values->data(), {n}, at::kDouble).to(device_)};
    group_->allreduce(tensors)->wait(timeout_);
    const at::Tensor host = tensors[0].cpu();
    std::memcpy(values->data(), host.data_ptr<double>(), n * sizeof(double));
    return true;
  } catch (const std::exception& e) {
    healthy_ = false;
    *error = "nccl all-reduce failed: " + firstLine(e.what());
    return false;
  }
}

}  // namespace detail
}  // namespace attnscope
