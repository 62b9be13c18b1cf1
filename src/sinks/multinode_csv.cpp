// The multi-node head's CSV run directory (sinks/multinode_csv.hpp).
#include "sinks/multinode_csv.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <unordered_map>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "core/json_text.hpp"
#include "sinks/format.hpp"
#include "sinks/run_csv.hpp"

namespace sonde::multinode {

namespace {

class CsvStore final : public Store {
 public:
  CsvStore(std::string dir, UniqueFd dir_fd,
           std::function<void(const std::string&, nlohmann::json)> set_key, nlohmann::json manifest)
      : dir_(std::move(dir)),
        dir_fd_(std::move(dir_fd)),
        set_key_(std::move(set_key)),
        manifest_(manifest.is_object() ? std::move(manifest) : nlohmann::json::object()) {}

  Result<void> init() {
    if (::mkdirat(dir_fd_.get(), "nodes", 0755) != 0 && errno != EEXIST)
      return make_error(Errc::io,
                        fmt::format("cannot create {}/nodes: {}", dir_, std::strerror(errno)));
    UniqueFd nodes(
        ::openat(dir_fd_.get(), "nodes", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!nodes)
      return make_error(Errc::io,
                        fmt::format("cannot open {}/nodes: {}", dir_, std::strerror(errno)));
    nodes_fd_ = std::move(nodes);
    if (!set_key_) return write_manifest();
    return {};
  }

  Result<void> begin_node(const std::string& node, Level level,
                          const std::vector<std::string>& columns) override {
    auto& n = nodes_[node];
    if (!n.dir) {
      if (!is_plain_name(node))
        return make_error(Errc::io, fmt::format("node name '{}' is not a file name", node));
      if (::mkdirat(nodes_fd_.get(), node.c_str(), 0755) != 0 && errno != EEXIST)
        return make_error(Errc::io, fmt::format("cannot create {}/nodes/{}: {}", dir_, node,
                                                std::strerror(errno)));
      n.dir.reset(
          ::openat(nodes_fd_.get(), node.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!n.dir)
        return make_error(
            Errc::io, fmt::format("cannot open {}/nodes/{}: {}", dir_, node, std::strerror(errno)));
    }
    const std::string name = fmt::format("perf_{}.csv", level_name(level));
    auto f = RunCsvFile::create(n.dir.get(), name, fmt::format("{}/nodes/{}/{}", dir_, node, name),
                                columns);
    if (!f) return f.error();
    n.files[level_index(level)] = std::move(*f);
    return {};
  }

  void node_row(const std::string& node, Level level, double time_s, double wallclock_s,
                std::span<const double> values) override {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return;
    write_row(it->second.files[level_index(level)], time_s, wallclock_s, values, "nodes/" + node);
  }

  Result<void> begin_aggregate(Level level, const std::vector<std::string>& columns) override {
    const std::string name = fmt::format("perf_{}.csv", level_name(level));
    auto f = RunCsvFile::create(dir_fd_.get(), name, dir_ + "/" + name, columns);
    if (!f) return f.error();
    agg_[level_index(level)] = std::move(*f);
    return {};
  }

  void aggregate_row(Level level, double time_s, double wallclock_s,
                     std::span<const double> values) override {
    write_row(agg_[level_index(level)], time_s, wallclock_s, values, "the aggregate");
  }

  void set_manifest(const std::string& key, nlohmann::json value) override {
    manifest_[key] = value;
    if (set_key_) {
      set_key_(key, std::move(value));
    } else if (auto ok = write_manifest(); !ok) {
      std::cerr << "sonde: error: " << ok.error().message << "\n";
    }
  }

  nlohmann::json manifest(const std::string& key) const override {
    return manifest_.contains(key) ? manifest_[key] : nlohmann::json();
  }

  bool failed() const override { return failed_; }

 private:
  struct NodeFiles {
    UniqueFd dir;
    std::array<RunCsvFile, kNumLevels> files;
  };

  Result<void> write_manifest() {
    return replace_file_in(dir_fd_.get(), "manifest.json", json_text(manifest_, 2) + "\n",
                           dir_ + "/manifest.json");
  }

  void write_row(RunCsvFile& file, double time_s, double wallclock_s,
                 std::span<const double> values, const std::string& what) {
    if (failed_ || !file) return;
    if (!file.append(time_s, wallclock_s, values)) {
      failed_ = true;
      std::cerr << fmt::format(
          "sonde: error: writing {} rows in {} failed: {}; no more rows are written, the run "
          "goes on and the rows already written stay valid\n",
          what, dir_, std::strerror(errno));
    }
  }

  std::string dir_;
  UniqueFd dir_fd_, nodes_fd_;
  std::function<void(const std::string&, nlohmann::json)> set_key_;
  nlohmann::json manifest_;
  std::unordered_map<std::string, NodeFiles> nodes_;
  std::array<RunCsvFile, kNumLevels> agg_;
  bool failed_ = false;
};

}  // namespace

Result<std::unique_ptr<Store>> make_csv_store(
    const std::string& dir, std::function<void(const std::string&, nlohmann::json)> set_key,
    nlohmann::json manifest) {
  Result<UniqueFd> fd =
      set_key ? open_output_dir(dir, false) : open_new_run_dir(dir, "choose another --out");
  if (!fd) return fd.error();
  auto store =
      std::make_unique<CsvStore>(dir, std::move(*fd), std::move(set_key), std::move(manifest));
  if (auto ok = store->init(); !ok) return ok.error();
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace sonde::multinode
