#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace attnscope {
namespace detail {

// A shared library opened at run time: first one the process already loaded under any of the
// names (so that attnscope uses the same instance as LibTorch), else the first that loads.
// Never closed: the library may still call back into buffers handed out.
class DynamicLibrary {
 public:
  DynamicLibrary(std::initializer_list<const char*> loadedNames,
                 std::initializer_list<const char*> loadNames) {
    for (const char* n : loadedNames) {
      if ((handle_ = ::dlopen(n, RTLD_NOW | RTLD_NOLOAD)) != nullptr) {
        path_ = n;
        return;
      }
    }
    for (const char* n : loadNames) {
      if (n == nullptr || *n == '\0') continue;
      if ((handle_ = ::dlopen(n, RTLD_NOW | RTLD_LOCAL)) != nullptr) {
        path_ = n;
        return;
      }
      const char* e = ::dlerror();
      if (e != nullptr) error_ = e;
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

}  // namespace detail
}  // namespace attnscope
