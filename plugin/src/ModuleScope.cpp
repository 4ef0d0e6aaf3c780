#include "attnscope/ModuleScope.h"

#include <mutex>
#include <unordered_map>

#include "attnscope/core/Log.h"

namespace attnscope {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, std::string> paths;
  bool warned = false;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: scopes may run during static teardown
  return *r;
}

}  // namespace

void nameModules(const torch::nn::Module& root, const std::string& prefix) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!prefix.empty()) r.paths.emplace(&root, prefix);
  for (const auto& item : root.named_modules(/*name_prefix=*/prefix, /*include_self=*/false)) {
    r.paths.emplace(item.value().get(), item.key());
  }
}

std::string moduleLayerName(const torch::nn::Module& module) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.paths.find(&module);
  if (it != r.paths.end()) return it->second;
  // The class name without its namespaces ("ns::(anonymous namespace)::GptImpl" -> "GptImpl").
  std::string name = module.name();
  const size_t colon = name.rfind("::");
  if (colon != std::string::npos) name.erase(0, colon + 2);
  if (!r.warned) {
    r.warned = true;
    ATTNSCOPE_LOG(kWarn,
                  "attnscope::ModuleScope on a "
                      << name << " that nameModules() did not see: its layer is named \"" << name
                      << "\"; call attnscope::nameModules(model) once after building the model");
  }
  return name;
}

namespace {
std::string nameOfModule(const void* module) {
  return moduleLayerName(*static_cast<const torch::nn::Module*>(module));
}
}  // namespace

// The lookup (a lock and a hash probe) runs on recorded calls only.
ModuleScope::ModuleScope(const torch::nn::Module& module)
    : scope_(&nameOfModule, &module, ScopeType::kLayer) {}

}  // namespace attnscope
