#pragma once
// The vendor backends behind open_gpus() (src/gpu/gpu.cpp): each one loads its library with
// dlopen and initialises it, or returns nullptr and says why in `note`.
#include <dlfcn.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu.hpp"

namespace sonde::gpu {

/// A library opened with dlopen, closed on destruction.
class Library {
 public:
  Library() = default;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  /// Opens the first loadable name; on failure `error()` tells why for each name tried.
  bool open(const std::vector<std::string>& names) {
    for (const auto& name : names) {
      dlerror();
      handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle_ != nullptr) {
        path_ = name;
        return true;
      }
      const char* e = dlerror();
      if (!error_.empty()) error_ += "; ";
      error_ += "cannot load " + name + ": " + (e != nullptr ? e : "unknown error");
    }
    return false;
  }
  /// The symbol, or nullptr when the library lacks it.
  template <typename Fn>
  Fn sym(const char* name) const {
    return reinterpret_cast<Fn>(dlsym(handle_, name));
  }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  void* handle_ = nullptr;
  std::string error_;
  std::string path_;
};

/// NVML: `path` empty means $SONDE_NVML_LIBRARY, else libnvidia-ml.so.1.
std::unique_ptr<Backend> open_nvml(const std::string& path, std::string& note);
/// ROCm SMI: `path` empty means $SONDE_ROCM_SMI_LIBRARY, else librocm_smi64.so(.1|.7|.6|.5).
std::unique_ptr<Backend> open_rocm(const std::string& path, std::string& note);

}  // namespace sonde::gpu
