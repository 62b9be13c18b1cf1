// network: bytes and packets sent/received per second on the node (/proc/net/dev). Linux has no
// per-process network counters without eBPF or root, so the collector only has the system level.
#include <algorithm>

#include "collectors/builtin.hpp"
#include "core/procfs.hpp"

namespace sonde::collectors {
namespace {
class NetworkCollector final : public Collector {
 public:
  NetworkCollector(const Roots& roots, bool include_loopback, std::vector<std::string> interfaces)
      : path_(roots.proc + "/net/dev"),
        include_loopback_(include_loopback),
        interfaces_(std::move(interfaces)) {}

  Result<void> setup() override {
    auto text = read_file(path_);
    if (!text) return make_error(Errc::unavailable, text.error().message);
    return {};
  }
  bool supports(Level level) const override { return level == Level::system; }

  Result<RawValue> collect(Level, const TickContext&) override {
    auto text = read_file(path_);
    if (!text) return text.error();
    auto devs = procfs::parse_net_dev(*text);
    if (!devs) return devs.error();
    Counters c{{0, 0, 0, 0}};
    for (const auto& d : *devs) {
      if (d.iface == "lo" && !include_loopback_) continue;
      if (!interfaces_.empty() &&
          std::find(interfaces_.begin(), interfaces_.end(), d.iface) == interfaces_.end())
        continue;
      c.values[0] += static_cast<double>(d.tx_bytes);
      c.values[1] += static_cast<double>(d.rx_bytes);
      c.values[2] += static_cast<double>(d.tx_packets);
      c.values[3] += static_cast<double>(d.rx_packets);
    }
    return RawValue(std::move(c));
  }

 private:
  std::string path_;
  bool include_loopback_;
  std::vector<std::string> interfaces_;
};
}  // namespace

CollectorInfo network_info() {
  return {"sonde.collectors.network",
          "bytes and packets sent/received per second on the node (not loopback)",
          {{"include_loopback", ParamType::boolean, false, "count the loopback interface too"},
           {"interfaces", ParamType::string_list, std::vector<std::string>{},
            "only these interfaces (empty: all)"}},
          false,
          [](const CollectorArgs& a) {
            return std::make_unique<NetworkCollector>(*a.roots, a.flag("include_loopback"),
                                                      a.strings("interfaces"));
          }};
}

}  // namespace sonde::collectors
