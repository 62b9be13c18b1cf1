// The AdminComment line of a job's efficiency (views/admin_comment.hpp): SONDE1:base64(gzip).
#include "views/admin_comment.hpp"

#include "core/base64.hpp"
#include "core/gzip.hpp"
#include "core/json_text.hpp"

namespace sonde::promq {

namespace {
std::string pack(const nlohmann::json& j) {
  return "SONDE1:" + base64_encode(gzip(json_text(j), 9));
}
}  // namespace

std::string admin_comment(const nlohmann::json& stats, std::size_t max_bytes) {
  std::string s = pack(stats);
  if (s.size() <= max_bytes) return s;
  nlohmann::json j = stats;
  for (auto& n : j["nodes"]) n.erase("gpus");
  s = pack(j);
  if (s.size() <= max_bytes) return s;
  j["nodes_omitted"] = j["nodes"].size();
  j["nodes"] = nlohmann::json::array();
  s = pack(j);
  return s.size() <= max_bytes ? s : std::string();
}

}  // namespace sonde::promq
