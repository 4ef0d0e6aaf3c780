// The attnscope Python module's native part: the same libattnscope the C++ API uses.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>

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
      "check_config", [](const std::map<std::string, std::string>& variables) { attnscope::Config::fromVariables(variables); },
      py::arg("variables"));
  m.def("stop", [] {
    py::gil_scoped_release release;  // the last round may wait on other ranks
    attnscope::stop();
  });
  m.def("step", [] { attnscope::step(); });
  m.def("is_running", [] { return attnscope::isRunning(); });
  m.def("version", [] { return std::string(attnscope::version()); });
  m.def("summary_json", [] { return attnscope::summaryJson(); });
  m.def("variables", [] {
    py::list out;
    for (const auto& v : attnscope::Config::variables()) {
      out.append(py::dict(py::arg("name") = v.name, py::arg("type") = v.type, py::arg("default") = v.defaultValue,
                          py::arg("allowed") = v.allowed, py::arg("meaning") = v.meaning));
    }
    return out;
  });
  py::class_<Attention>(m, "attention")
      .def(py::init<std::string>(), py::arg("name"))
      .def("__enter__", &Attention::enter, py::return_value_policy::reference)
      .def("__exit__", &Attention::exit)
      .def_property_readonly("name", &Attention::name);
}
