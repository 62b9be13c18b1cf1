#pragma once
// The multi-node head's store in a CSV run directory (docs/multinode.md): the aggregate's
// perf_<level>.csv, each node's nodes/<node>/perf_<level>.csv and the manifest.
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/multinode_store.hpp"
#include "core/result.hpp"

namespace sonde::multinode {

/// The run directory `dir` (already created by the run's own sink, or created here when
/// `set_key` is empty, with `manifest` as its first manifest.json). `manifest`'s keys are the
/// base that manifest() returns (the head merges "levels", "files", "node_info"… into them).
/// `set_key` sets a key of the manifest the run's own sink owns (RunDirSink::update).
Result<std::unique_ptr<Store>> make_csv_store(
    const std::string& dir, std::function<void(const std::string&, nlohmann::json)> set_key,
    nlohmann::json manifest = nullptr);

}  // namespace sonde::multinode
