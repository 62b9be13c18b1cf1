// The AMD backend: ROCm SMI loaded with dlopen.
#include "gpu/backends.hpp"

namespace sonde::gpu {

std::unique_ptr<Backend> open_rocm(const std::string&, std::string&) {
  return nullptr;
}

}  // namespace sonde::gpu
