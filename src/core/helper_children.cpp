#include "core/helper_children.hpp"

#include <mutex>
#include <unordered_set>

namespace sonde {
namespace {
std::mutex& mutex() {
  static std::mutex m;
  return m;
}
std::unordered_set<int>& pids() {
  static std::unordered_set<int> s;
  return s;
}
}  // namespace

void note_helper_child(int pid) {
  std::lock_guard lock(mutex());
  pids().insert(pid);
}

void forget_helper_child(int pid) {
  std::lock_guard lock(mutex());
  pids().erase(pid);
}

bool is_helper_child(int pid) {
  std::lock_guard lock(mutex());
  return pids().count(pid) > 0;
}

}  // namespace sonde
