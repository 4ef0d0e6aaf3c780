#include "Aggregator.h"

#include <atomic>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "C10dAggregator.h"
#include "attnscope/core/Log.h"
#if ATTNSCOPE_WITH_MPI
#include "MpiAggregator.h"
#endif


namespace attnscope {
namespace detail {
namespace {

std::string firstLine(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// The store attnscope's group forms on, under the "attnscope/<run>/" prefix: the program's
// store when it handed one in; torchrun's agent store; else attnscope's own TCPStore served by
// rank 0 on storePort (MASTER_PORT + 1 by default). Unused in a build with neither Gloo nor NCCL.
[[maybe_unused]] c10::intrusive_ptr<c10d::Store> openStore(const Topology& t, const StoreSource& source,
                                                           std::chrono::milliseconds timeout,
                                                           int storePort) {
  c10::intrusive_ptr<c10d::Store> base = source.store;
  if (!base) {
    if (t.masterAddr.empty() || t.masterPort == 0) {
      throw std::runtime_error("no store: hand one to attnscope::start, or set MASTER_ADDR and "
                               "MASTER_PORT (torchrun does)");
    }
    c10d::TCPStoreOptions options;
    options.timeout = timeout;
    options.waitWorkers = false;
    if (t.agentStore) {
      options.port = static_cast<uint16_t>(t.masterPort);
      options.isServer = false;
    } else {
      options.port = static_cast<uint16_t>(storePort != 0 ? storePort : t.masterPort + 1);
      options.isServer = t.rank == 0;
    }
    base = c10::make_intrusive<c10d::TCPStore>(t.masterAddr, options);
  }
  // A generation per start() in this process keeps a restarted session's keys apart.
  static std::atomic<int> generation{0};
  const std::string prefix = "attnscope/" + (t.runId.empty() ? std::string("job") : t.runId) + "/" +
                             std::to_string(generation.fetch_add(1)) + "/";
  return c10::make_intrusive<c10d::PrefixStore>(prefix, base);
}

}  // namespace

bool aggregationAvailable(Aggregation aggregation) {
  switch (aggregation) {
    case Aggregation::kNccl:
      return ATTNSCOPE_WITH_NCCL != 0;  // ProcessGroupNCCL needs a CUDA LibTorch
    case Aggregation::kMpi:
      return ATTNSCOPE_WITH_MPI != 0;
    case Aggregation::kGloo:
      return ATTNSCOPE_WITH_GLOO != 0;
    default:
      return true;
  }
}

std::string aggregationUnavailableMessage(Aggregation aggregation) {
  const char* why = aggregation == Aggregation::kNccl  ? "LibTorch without CUDA/NCCL"
                    : aggregation == Aggregation::kGloo ? "built without Gloo's headers"
                                                        : "built without MPI";
  std::string allowed = "auto";
  for (Aggregation a : {Aggregation::kGloo, Aggregation::kLocal, Aggregation::kNone, Aggregation::kMpi,
                        Aggregation::kNccl}) {
    if (aggregationAvailable(a)) allowed += std::string(", ") + aggregationName(a);
  }
  return std::string(kEnvAggregation) + "=\"" + aggregationName(aggregation) +
         "\" is not available in this build (" + why + "); allowed: " + allowed;
}

std::unique_ptr<Aggregator> createAggregator(Aggregation aggregation, const Topology& topology,
                                             const StoreSource& source,
                                             std::chrono::milliseconds timeout, int storePort,
                                             std::string* error) {
  try {
    switch (aggregation) {
      case Aggregation::kNone:
        return nullptr;
      case Aggregation::kLocal:
        return std::make_unique<LocalAggregator>();
      case Aggregation::kAuto:
      case Aggregation::kGloo:
        if (topology.worldSize == 1 && aggregation == Aggregation::kAuto) {
          return std::make_unique<LocalAggregator>();
        }
#if ATTNSCOPE_WITH_GLOO
        return C10dAggregator::gloo(openStore(topology, source, timeout, storePort), topology.rank,
                                    topology.worldSize, timeout);
#else
        *error = "this build has no Gloo (its headers were not found at build time)";
        return nullptr;
#endif
      case Aggregation::kMpi:
#if ATTNSCOPE_WITH_MPI
        return std::make_unique<MpiAggregator>(topology.rank, topology.worldSize, timeout);
#else
        *error = "this build has no MPI";
        return nullptr;
#endif
      case Aggregation::kNccl:
#if ATTNSCOPE_WITH_NCCL
        return C10dAggregator::nccl(openStore(topology, source, timeout, storePort), topology.rank,
                                    topology.worldSize, topology.localRank, timeout);
#else
        *error = "this build has no NCCL";
        return nullptr;
#endif
    }
  } catch (const std::exception& e) {
    *error = firstLine(e.what());
  }
  return nullptr;
}

}  // namespace detail
}  // namespace attnscope
