#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>
#include <vector>

namespace attnscope {
namespace detail {

// A shared library opened at run time: first one the process already loaded under any of the
// names (so that attnscope uses the same instance as LibTorch), else the first that loads.
// Never closed: the library may still call back into buffers handed out.
class DynamicLibrary {
 public:
  DynamicLibrary(std::initializer_list<const char*> loadedNames,
                 const std::vector<std::string>& loadNames) {
    for (const char* n : loadedNames) {
      if ((handle_ = ::dlopen(n, RTLD_NOW | RTLD_NOLOAD)) != nullptr) {
        path_ = n;
        return;
      }
    }
    for (const std::string& n : loadNames) {
      if (n.empty()) continue;
      if ((handle_ = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) {
        path_ = n;
        return;
      }
      const char* e = ::dlerror();
      if (e != nullptr) error_ += (error_.empty() ? "" : "; ") + std::string(e);
    }
  }
  bool ok() const { return handle_ != nullptr; }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }

  // Binds `fn` to the symbol `name`; false (and an error naming it) when it is missing.
  template <typename Fn>
  bool bind(Fn* fn, const char* name) {
    *fn = reinterpret_cast<Fn>(::dlsym(handle_, name));
    if (*fn == nullptr) error_ = std::string(name) + " not found in " + path_;
    return *fn != nullptr;
  }

 private:
  void* handle_ = nullptr;
  std::string path_;
  std::string error_;
};

// The directory of a library the process already loaded (e.g. "libc10.so": PyTorch's torch/lib),
// empty when it is not loaded.
inline std::string loadedLibraryDir(const char* name) {
  void* h = ::dlopen(name, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return "";
  char origin[4096] = {0};
  const bool ok = ::dlinfo(h, RTLD_DI_ORIGIN, origin) == 0;
  ::dlclose(h);
  return ok ? origin : "";
}

// Where a pip-installed PyTorch keeps CUDA's libraries, relative to its torch/lib: the CUDA 13
// wheels' nvidia/cu13/lib, the CUDA 12 wheels' nvidia/<component>/lib.
inline std::vector<std::string> torchRelativePaths(const std::string& torchLib,
                                                   const std::string& component,
                                                   const std::string& lib13,
                                                   const std::string& lib12) {
  if (torchLib.empty()) return {};
  const std::string site = torchLib + "/../../nvidia/";
  return {site + "cu13/lib/" + lib13, site + "cu12/lib/" + lib12,
          site + component + "/lib/" + lib12};
}

}  // namespace detail
}  // namespace attnscope
