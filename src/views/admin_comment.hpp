#pragma once
// A job's efficiency (views/prom_jobstats.hpp) packed into one line for Slurm's AdminComment.
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace sonde::promq {

/// The stats packed for Slurm's AdminComment (share/sonde/slurm/epilog-jobstats.sh):
/// `SONDE1:` + base64(gzip(compact JSON)), at most `max_bytes` long. When longer, the per-GPU
/// lists are left out, then the nodes (`nodes_omitted` says how many); the overall figures stay.
/// "" when even those do not fit.
std::string admin_comment(const nlohmann::json& stats, std::size_t max_bytes);

}  // namespace sonde::promq
