#pragma once
// What a status plugin found for each process, looked up once per query however many GPUs the
// process uses (the plugin clears it in before_query).
#include <map>
#include <optional>
#include <utility>

namespace sonde::status {

template <class T>
class PidCache {
 public:
  void clear() { found_.clear(); }
  /// The cached value for `pid`, else `lookup()`'s (kept, nullopt included).
  template <class Lookup>
  const std::optional<T>& get(int pid, Lookup&& lookup) {
    auto it = found_.find(pid);
    if (it == found_.end()) it = found_.emplace(pid, std::forward<Lookup>(lookup)()).first;
    return it->second;
  }

 private:
  std::map<int, std::optional<T>> found_;
};

}  // namespace sonde::status
