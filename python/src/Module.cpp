// The attnscope Python module's native part: the same libattnscope the C++ API uses.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "attnscope/Distributed.h"
#include "attnscope/attnscope.h"

namespace py = pybind11;

namespace {

// `with attnscope.attention("layers.0.attn"):` — one AttentionScope from __enter__ to __exit__.
class Attention {
 public:
  explicit Attention(std::string name) : name_(std::move(name)) {}
  Attention& enter() {
    scope_ = std::make_unique<attnscope::AttentionScope>(name_);
    return *this;
  }
  bool exit(const py::object&, const py::object&, const py::object&) {
    scope_.reset();
    return false;  // exceptions propagate
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::unique_ptr<attnscope::AttentionScope> scope_;
};

// The zero-code attach's module hooks (attnscope/_attach.py): a pre-hook opens, a forward hook
// (always_call) closes. One stack per thread; a hook pair never straddles threads.
thread_local std::vector<std::unique_ptr<attnscope::AttentionScope>> tScopes;
thread_local std::vector<std::unique_ptr<attnscope::FusedOpScope>> tFused;

const std::map<std::string, attnscope::OpKind>& kindsByName() {
  static const std::map<std::string, attnscope::OpKind> kinds = [] {
    std::map<std::string, attnscope::OpKind> m;
    for (int k = 0; k < attnscope::kNumOpKinds; ++k) {
      const auto kind = static_cast<attnscope::OpKind>(k);
      m[attnscope::opKindName(kind)] = kind;
    }
    return m;
  }();
  return kinds;
}

attnscope::OpKind kindOf(const std::string& name) {
  const auto& kinds = kindsByName();
  const auto it = kinds.find(name);
  if (it == kinds.end()) {
    std::string allowed;
    for (const auto& [n, k] : kinds) allowed += (allowed.empty() ? "" : ", ") + n;
    throw std::invalid_argument("op kind \"" + name + "\" is unknown; allowed: " + allowed);
  }
  return it->second;
}

// `with attnscope.op_kind("positional"):` inside an attention call.
class KindScope {
 public:
  explicit KindScope(const std::string& kind) : kind_(kindOf(kind)) {}
  void enter() { scope_ = std::make_unique<attnscope::OpKindScope>(kind_); }
  bool exit(const py::object&, const py::object&, const py::object&) {
    scope_.reset();
    return false;
  }

 private:
  attnscope::OpKind kind_;
  std::unique_ptr<attnscope::OpKindScope> scope_;
};

// The settings Python acts on itself, by keyword, as libattnscope parsed them: the attach's side
// group (enable, aggregation, round_timeout_s), its discovery patterns, the launcher's endpoint
// banner (port, bind). Python parses no ATTNSCOPE_* value again.
py::dict parsedSettings(const attnscope::Config& c) {
  return py::dict(py::arg("enable") = c.enable,
                  py::arg("aggregation") = std::string(attnscope::aggregationName(c.aggregation)),
                  py::arg("round_timeout_s") = c.roundTimeoutSeconds, py::arg("port") = c.port,
                  py::arg("bind") = c.bind, py::arg("attention_modules") = c.attentionModules,
                  py::arg("attention_exclude") = c.attentionExclude);
}

void start(const std::map<std::string, std::string>& variables, int rank, int worldSize) {
  // Config errors are std::invalid_argument: ValueError in Python, with the same text.
  const attnscope::Config config = attnscope::Config::fromVariables(variables);
  attnscope::DistributedOptions distributed;
  distributed.rank = rank;
  distributed.worldSize = worldSize;
  py::gil_scoped_release release;
  attnscope::start(config, distributed);
}

}  // namespace

PYBIND11_MODULE(_attnscope, m) {
  m.doc() = "attnscope native module (libattnscope)";
  m.def("start", &start, py::arg("variables"), py::arg("rank") = -1, py::arg("world_size") = 0);
  m.def(
      "check_config",
      [](const std::map<std::string, std::string>& variables) {
        return parsedSettings(attnscope::Config::fromVariables(variables));
      },
      py::arg("variables"));
  // This process's ATTNSCOPE_* variables, parsed as start() will parse them; unknown names are
  // left to start() to warn about.
  m.def("environment_config", [] {
    std::vector<std::string> warnings;
    return parsedSettings(attnscope::Config::fromEnvironment(&warnings));
  });
  m.def("stop", [] {
    py::gil_scoped_release release;  // the last round may wait on other ranks
    attnscope::stop();
  });
  m.def("step", [] { attnscope::step(); });
  m.def("is_running", [] { return attnscope::isRunning(); });
  m.def("version", [] { return std::string(attnscope::version()); });
  m.def("summary_json", [] { return attnscope::summaryJson(); });
  const auto variableDict = [](const attnscope::Config::Variable& v) {
    return py::dict(py::arg("name") = v.name, py::arg("type") = v.type,
                    py::arg("default") = v.defaultValue, py::arg("allowed") = v.allowed,
                    py::arg("meaning") = v.meaning, py::arg("doc") = v.doc, py::arg("min") = v.min,
                    py::arg("max") = v.max);
  };
  m.def("variables", [variableDict] {
    py::list out;
    for (const auto& v : attnscope::Config::variables()) out.append(variableDict(v));
    return out;
  });
  m.def(
      "variable",
      [variableDict](const std::string& name) {
        try {
          return variableDict(attnscope::Config::variable(name));
        } catch (const std::invalid_argument& e) {
          throw py::key_error(e.what());
        }
      },
      py::arg("name"));
  m.def(
      "enter_scope",
      [](const std::string& name, bool region) {
        tScopes.push_back(std::make_unique<attnscope::AttentionScope>(
            name.c_str(), region ? attnscope::ScopeType::kRegion : attnscope::ScopeType::kLayer));
      },
      py::arg("name"), py::arg("region") = false);
  // `results`: None (unknown: backward observed through a RecordFunction callback), or the
  // `_cdata` (TensorImpl address) of each result tensor that requires grad, at most 8, the
  // caller holding the tensors: backward is then observed through hooks on the call's own nodes.
  m.def(
      "exit_scope",
      [](const py::object& results) {
        if (tScopes.empty()) return;
        if (!results.is_none()) {
          std::array<at::Tensor, 8> tensors;
          size_t n = 0;
          for (const py::handle item : results) {
            if (n == tensors.size()) break;
            auto* impl = reinterpret_cast<c10::TensorImpl*>(item.cast<uintptr_t>());
            tensors[n++] = at::Tensor(
                c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim_copy(impl));
          }
          tScopes.back()->close(tensors.data(), n);
        }
        tScopes.pop_back();
      },
      py::arg("results") = py::none());
  m.def(
      "enter_fused",
      [](const std::string& name) {
        tFused.push_back(std::make_unique<attnscope::FusedOpScope>(name.c_str()));
      },
      py::arg("name"));
  m.def("exit_fused", [] {
    if (!tFused.empty()) tFused.pop_back();
  });
  m.def("describe_layer", &attnscope::describeLayer, py::arg("name"), py::arg("rule"),
        py::arg("source"));
  m.def("note_discovery", &attnscope::noteDiscovery, py::arg("note"));
  m.def("note_compile", &attnscope::noteCompile, py::arg("seconds"), py::arg("count"));
  m.def("note_steps", &attnscope::noteSteps, py::arg("steps"));
  // Steps without an attention call after which a run says it found nothing (the attach reports
  // its optimizer steps then).
  m.attr("NOTHING_FOUND_STEPS") = attnscope::kNothingFoundSteps;
  m.def("layers_seen", [] { return attnscope::runInfo().layersSeen; });
  m.def("op_kinds", [] {
    std::vector<std::string> names;
    for (int k = 0; k < attnscope::kNumOpKinds; ++k)
      names.push_back(attnscope::opKindName(static_cast<attnscope::OpKind>(k)));
    return names;
  });
  py::class_<KindScope>(m, "op_kind")
      .def(py::init<std::string>(), py::arg("kind"))
      .def("__enter__", [](KindScope& k) { k.enter(); })
      .def("__exit__", &KindScope::exit);
  py::class_<Attention>(m, "attention")
      .def(py::init<std::string>(), py::arg("name"))
      .def("__enter__", &Attention::enter, py::return_value_policy::reference)
      .def("__exit__", &Attention::exit)
      .def_property_readonly("name", &Attention::name);
}
