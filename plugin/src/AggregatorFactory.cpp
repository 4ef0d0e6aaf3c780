#include "AggregatorFactory.h"

#include <atomic>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "C10dAggregator.h"
#include "StoreAggregator.h"
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
// rank 0 on storePort (MASTER_PORT + 1 by default).
c10::intrusive_ptr<c10d::Store> openStore(const Topology& t, const StoreSource& source,
                                          std::chrono::milliseconds timeout, int storePort) {
  // A client of its own on the program's store: a TCPStore client serialises its calls, so a wait
  // of attnscope's (up to the round timeout) on the job's client would stall the job's own calls.
  c10::intrusive_ptr<c10d::Store> base;
  if (source.store) {
    try {
      base = source.store->clone();
    } catch (const std::exception& e) {
      ATTNSCOPE_LOG(kDebug,
                    "the store handed in cannot be cloned, sharing it: " << firstLine(e.what()));
      base = source.store;
    }
  }
  if (!base) {
    if (t.masterAddr.empty() || t.masterPort == 0) {
      throw std::runtime_error(
          "no store: hand one to attnscope::start, or set MASTER_ADDR and "
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
      return false;  // kNcclRefused
    case Aggregation::kMpi:
      return ATTNSCOPE_WITH_MPI != 0;
    default:
      return true;
  }
}

std::string aggregationUnavailableMessage(Aggregation aggregation) {
  std::string allowed = "auto";
  for (Aggregation a : {Aggregation::kGloo, Aggregation::kStore, Aggregation::kLocal,
                        Aggregation::kNone, Aggregation::kMpi}) {
    if (aggregationAvailable(a)) allowed += std::string(", ") + aggregationName(a);
  }
  const std::string head =
      std::string(kEnvAggregation) + "=\"" + aggregationName(aggregation) + "\" is not ";
  if (aggregation == Aggregation::kNccl) {
    return head + "supported (" + kNcclRefused + "); allowed: " + allowed;
  }
  return head + "available in this build (built without MPI); allowed: " + allowed;
}

AggregatorFactory aggregatorFactory(const Config& config, const Topology& topology,
                                    StoreSource source) {
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config.roundTimeoutSeconds * 1000));
  return [aggregation = config.aggregation, storePort = static_cast<int>(config.storePort),
          topology, source = std::move(source), timeout](std::string* error) {
    return createAggregator(aggregation, topology, source, timeout, storePort, error);
  };
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
        if (topology.worldSize == 1) return std::make_unique<LocalAggregator>();
        if (!source.group) {
          if (topology.worldSize > kStoreAggregationWarnRanks) {
            ATTNSCOPE_LOG(kWarn,
                          "aggregating "
                              << topology.worldSize
                              << " ranks through the store "
                                 "(no process group handed in): its host's traffic grows with the "
                                 "square of the world; hand in a Gloo side group, or use "
                                 "ATTNSCOPE_AGGREGATION=mpi (docs/AGGREGATION.md)");
          }
          return std::make_unique<StoreAggregator>(openStore(topology, source, timeout, storePort),
                                                   topology.rank, topology.worldSize, timeout);
        }
        [[fallthrough]];
      case Aggregation::kGloo:
        if (!source.group) {
          *error =
              "no process group was handed in for attnscope's collectives (Python's attach "
              "forms one after init_process_group; C++: DistributedOptions::aggregationGroup); "
              "ATTNSCOPE_AGGREGATION=store needs none";
          return nullptr;
        }
        if (source.group->getSize() != topology.worldSize ||
            source.group->getRank() != topology.rank) {
          *error = "the group handed in has rank " + std::to_string(source.group->getRank()) +
                   " of " + std::to_string(source.group->getSize()) + ", this rank is " +
                   std::to_string(topology.rank) + " of " + std::to_string(topology.worldSize);
          return nullptr;
        }
        return C10dAggregator::group(source.group, openStore(topology, source, timeout, storePort),
                                     timeout, error);
      case Aggregation::kStore:
        if (topology.worldSize == 1) return std::make_unique<LocalAggregator>();
        return std::make_unique<StoreAggregator>(openStore(topology, source, timeout, storePort),
                                                 topology.rank, topology.worldSize, timeout);
      case Aggregation::kMpi:
#if ATTNSCOPE_WITH_MPI
        return std::make_unique<MpiAggregator>(topology.rank, topology.worldSize, timeout);
#else
        *error = "this build has no MPI";
        return nullptr;
#endif
      case Aggregation::kNccl:
        *error = kNcclRefused;
        return nullptr;
    }
  } catch (const std::exception& e) {
    *error = firstLine(e.what());
  }
  return nullptr;
}

}  // namespace detail
}  // namespace attnscope
