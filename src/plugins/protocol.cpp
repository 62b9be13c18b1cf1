// The JSON-lines protocol of process plugins (docs/plugin-protocol.md): building and parsing the
// messages, converting reply values to raw values, and splitting a byte stream into lines.
#include "plugins/protocol.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "core/json_text.hpp"
#include "core/nan.hpp"

namespace sonde::plugins::protocol {
namespace {

using json = nlohmann::json;

std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    default: return "something else";
  }
}

Error value_error(std::string message) {
  return make_error(Errc::failed, std::move(message));
}

// One number of a value; `allow_null` maps null to NaN ("not measured").
Result<double> number(const json& v, bool allow_null, std::string_view where) {
  if (v.is_null() && allow_null) return kNaN;
  if (!v.is_number())
    return value_error(fmt::format("{}: expected a number, got {}", where, describe(v)));
  const double d = v.get<double>();
  if (!std::isfinite(d)) return value_error(fmt::format("{}: {} is not a finite number", where, d));
  return d;
}

Result<std::vector<double>> numbers(const json& v, bool allow_null, std::string_view what) {
  if (!v.is_array())
    return value_error(fmt::format("expected {} (a list of numbers), got {}", what, describe(v)));
  std::vector<double> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto d = number(v[i], allow_null, fmt::format("{} entry {}", what, i));
    if (!d) return d.error();
    out.push_back(*d);
  }
  return out;
}

json finite_or_null(double d) {
  return std::isfinite(d) ? json(d) : json(nullptr);
}

json doubles_to_json(const std::vector<double>& values) {
  json a = json::array();
  for (double d : values) a.push_back(finite_or_null(d));
  return a;
}

// How a plain YAML scalar reads: a boolean, an integer, a finite number or a string.
json plain_scalar(const std::string& s) {
  static constexpr std::string_view kTrue[] = {"true", "True", "TRUE"};
  static constexpr std::string_view kFalse[] = {"false", "False", "FALSE"};
  static constexpr std::string_view kNull[] = {"null", "Null", "NULL", "~", ""};
  if (std::find(std::begin(kTrue), std::end(kTrue), s) != std::end(kTrue)) return true;
  if (std::find(std::begin(kFalse), std::end(kFalse), s) != std::end(kFalse)) return false;
  if (std::find(std::begin(kNull), std::end(kNull), s) != std::end(kNull)) return nullptr;
  const json parsed = json::parse(s, nullptr, false);
  if (parsed.is_number() && std::isfinite(parsed.get<double>())) return parsed;
  return s;
}

}  // namespace

// ---- values ----

Result<RawValue> raw_from_json(const json& v, std::string_view accepts) {
  if (accepts == "none") return RawValue(NoValue{});
  if (v.is_null()) return value_error("no value (null)");
  if (accepts == "scalar") {
    auto d = number(v, false, "scalar");
    if (!d) return d.error();
    return RawValue(Scalar{*d});
  }
  if (accepts == "per-device vector") {
    if (v.is_object()) {
      auto values = v.find("values");
      if (values == v.end()) return value_error("per-device vector: the object has no \"values\"");
      auto out = numbers(*values, true, "per-device vector");
      if (!out) return out.error();
      PerDevice pd{std::move(*out), std::nullopt};
      if (auto mean = v.find("mean"); mean != v.end() && !mean->is_null()) {
        auto m = number(*mean, false, "per-device vector mean");
        if (!m) return m.error();
        pd.mean = *m;
      }
      return RawValue(std::move(pd));
    }
    auto out = numbers(v, true, "per-device vector");
    if (!out) return out.error();
    return RawValue(PerDevice{std::move(*out), std::nullopt});
  }
  if (accepts == "counters") {
    auto out = numbers(v, false, "counters");
    if (!out) return out.error();
    return RawValue(Counters{std::move(*out)});
  }
  if (accepts == "per-device vectors") {
    if (!v.is_array())
      return value_error(
          fmt::format("expected per-device vectors (a list of lists of numbers), "
                      "got {}",
                      describe(v)));
    MultiPerDevice m;
    for (std::size_t i = 0; i < v.size(); ++i) {
      auto out = numbers(v[i], true, fmt::format("metric {}", i));
      if (!out) return out.error();
      m.metrics.push_back(std::move(*out));
    }
    return RawValue(std::move(m));
  }
  // A handler kind this host does not know: take the value by its shape.
  if (v.is_number()) return raw_from_json(v, "scalar");
  if (v.is_array() && !v.empty() && v[0].is_array()) return raw_from_json(v, "per-device vectors");
  return raw_from_json(v, "per-device vector");
}

json raw_to_json(const RawValue& value) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, NoValue>) {
          return nullptr;
        } else if constexpr (std::is_same_v<T, Scalar>) {
          return finite_or_null(v.value);
        } else if constexpr (std::is_same_v<T, PerDevice>) {
          if (!v.mean) return doubles_to_json(v.values);
          return json{{"values", doubles_to_json(v.values)}, {"mean", finite_or_null(*v.mean)}};
        } else if constexpr (std::is_same_v<T, MultiPerDevice>) {
          json a = json::array();
          for (const auto& m : v.metrics) a.push_back(doubles_to_json(m));
          return a;
        } else {
          return doubles_to_json(v.values);
        }
      },
      value);
}

// ---- keyword arguments and injected values ----

json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      // yaml-cpp tags quoted scalars "!", plain ones "?".
      return node.Tag() == "!" ? json(node.Scalar()) : plain_scalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& item : node) a.push_back(yaml_to_json(item));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : node) o[kv.first.Scalar()] = yaml_to_json(kv.second);
      return o;
    }
    default: return nullptr;
  }
}

YAML::Node json_to_yaml(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return YAML::Node(YAML::NodeType::Null);
    case json::value_t::boolean: return YAML::Node(value.get<bool>() ? "true" : "false");
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return YAML::Node(json_text(value));
    case json::value_t::string: {
      YAML::Node n(value.get<std::string>());
      n.SetTag("!");
      return n;
    }
    case json::value_t::array: {
      YAML::Node n(YAML::NodeType::Sequence);
      for (const auto& item : value) n.push_back(json_to_yaml(item));
      return n;
    }
    case json::value_t::object: {
      YAML::Node n(YAML::NodeType::Map);
      for (const auto& [k, v] : value.items()) n[k] = json_to_yaml(v);
      return n;
    }
    default: return YAML::Node();
  }
}

json node_info_to_json(const NodeInfo& node) {
  json limits = json::object(), sources = json::object();
  for (Level l : kAllLevels) {
    limits[std::string(level_name(l))] = node.memory_limit_bytes[level_index(l)];
    sources[std::string(level_name(l))] = node.memory_limit_source[level_index(l)];
  }
  return json{{"hostname", node.hostname},
              {"kernel", node.kernel},
              {"num_system_cpus", node.num_system_cpus},
              {"system_cpu_ids", node.system_cpu_ids},
              {"cpu_handles", node.cpu_handles},
              {"num_cpus", node.num_cpus},
              {"cpu_quota", node.cpu_quota ? json(*node.cpu_quota) : json(nullptr)},
              {"mem_total_bytes", node.mem_total_bytes},
              {"memory_limit_bytes", std::move(limits)},
              {"memory_limit_source", std::move(sources)},
              {"num_gpus", node.num_gpus},
              {"gpu_name", node.gpu_name},
              {"gpu_memory_gib", node.gpu_memory_gib}};
}

NodeInfo node_info_from_json(const json& j) {
  NodeInfo n;
  if (!j.is_object()) return n;
  n.hostname = j.value("hostname", std::string());
  n.kernel = j.value("kernel", std::string());
  n.num_system_cpus = j.value("num_system_cpus", 0);
  n.system_cpu_ids = j.value("system_cpu_ids", std::vector<int>());
  n.cpu_handles = j.value("cpu_handles", std::vector<int>());
  n.num_cpus = j.value("num_cpus", 0.0);
  if (auto q = j.find("cpu_quota"); q != j.end() && q->is_number()) n.cpu_quota = q->get<double>();
  n.mem_total_bytes = j.value("mem_total_bytes", std::uint64_t{0});
  for (Level l : kAllLevels) {
    const std::string name(level_name(l));
    if (auto m = j.find("memory_limit_bytes"); m != j.end() && m->is_object())
      n.memory_limit_bytes[level_index(l)] = m->value(name, std::uint64_t{0});
    if (auto s = j.find("memory_limit_source"); s != j.end() && s->is_object())
      n.memory_limit_source[level_index(l)] = s->value(name, std::string());
  }
  n.num_gpus = j.value("num_gpus", 0);
  n.gpu_name = j.value("gpu_name", std::string());
  n.gpu_memory_gib = j.value("gpu_memory_gib", 0.0);
  return n;
}

// ---- messages, host → child ----

std::string setup_request(const CollectorArgs& args, std::span<const Level> levels,
                          std::span<const std::string> skip_kwargs) {
  json kwargs = json::object();
  for (const auto& [key, arg] : args.raw_kwargs)
    if (std::find(skip_kwargs.begin(), skip_kwargs.end(), key) == skip_kwargs.end())
      kwargs[key] = yaml_to_json(arg.value);
  json inject = json::object();
  const TargetInfo* t = args.target;
  for (const auto& key : args.inject) {
    if (key == "node_info")
      inject[key] = args.node ? node_info_to_json(*args.node) : json(nullptr);
    else if (key == "pid" || key == "process")
      inject[key] = t && t->pid > 0 ? json(t->pid) : json(nullptr);
    else if (key == "uid")
      inject[key] = t ? json(t->uid) : json(nullptr);
    else if (key == "slurm_job")
      inject[key] = t && t->slurm_job ? json(*t->slurm_job) : json(nullptr);
  }
  json level_names = json::array();
  for (Level l : levels) level_names.push_back(level_name(l));
  // The target itself is no secret of the inject list: the context shows it to every collector.
  json target = {{"pid", t && t->pid > 0 ? json(t->pid) : json(nullptr)},
                 {"uid", t ? json(t->uid) : json(nullptr)},
                 {"slurm_job", t && t->slurm_job ? json(*t->slurm_job) : json(nullptr)}};
  json msg = {{"op", "setup"},
              {"name", args.name},
              {"kwargs", std::move(kwargs)},
              {"inject", std::move(inject)},
              {"target", std::move(target)},
              {"levels", std::move(level_names)},
              {"interval", args.interval_s},
              {"deadline", args.deadline_s},
              {"handler", {{"accepts", args.handler_accepts}, {"metrics", args.handler_metrics}}}};
  return json_text(msg) + "\n";
}

std::string tick_request(const TickContext& ctx, std::span<const Level> levels, bool context) {
  // Built by hand: this is the per-tick hot path and holds only numbers and level names.
  std::string out;
  out.reserve(160);
  fmt::format_to(
      std::back_inserter(out),
      "{{\"op\":\"tick\",\"tick\":{},\"time\":{},\"wallclock\":{},\"dt\":{},\"levels\":[", ctx.tick,
      ctx.time_s, ctx.wallclock_s, ctx.dt_s);
  for (std::size_t i = 0; i < levels.size(); ++i) {
    if (i) out += ',';
    out += '"';
    out += level_name(levels[i]);
    out += '"';
  }
  out += ']';
  if (context && ctx.procs != nullptr) {
    const ProcSnapshot& snap = *ctx.procs;
    json procs = json::array();
    for (const PidSample& p : snap.pids) {
      procs.push_back({{"pid", p.pid},
                       {"ppid", p.ppid},
                       {"uid", p.uid},
                       {"comm", std::string(p.comm())},
                       {"cpu_s", p.cpu_s},
                       {"child_cpu_s", p.child_cpu_s},
                       {"cpu_delta_s", p.cpu_delta_s},
                       {"child_cpu_delta_s", p.child_cpu_delta_s},
                       {"rss_bytes", p.rss_bytes},
                       {"io_valid", p.io_valid},
                       {"read_bytes", p.io.read_bytes},
                       {"write_bytes", p.io.write_bytes},
                       {"syscr", p.io.syscr},
                       {"syscw", p.io.syscw},
                       {"processor", p.processor},
                       {"num_threads", p.num_threads}});
    }
    json members = json::object();
    for (Level l : kAllLevels) {
      if (l == Level::system) continue;
      const auto& idx = snap.members[level_index(l)];
      if (idx.empty()) continue;
      json pids = json::array();
      for (std::uint32_t i : idx) pids.push_back(snap.pids[i].pid);
      members[std::string(level_name(l))] = std::move(pids);
    }
    json c = {{"total_pids", snap.total_pids},
              {"procs", std::move(procs)},
              {"members", std::move(members)}};
    out += ",\"context\":";
    out += json_text(c);
  }
  out += "}\n";
  return out;
}

// ---- replies, child → host ----

namespace {
Result<json> parse_object(std::string_view line) {
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    std::string shown(line.substr(0, 120));
    if (line.size() > 120) shown += "…";
    return make_error(Errc::parse, fmt::format("malformed reply (expected a JSON object on one "
                                               "line): '{}'",
                                               shown));
  }
  return j;
}

std::string error_text(const json& j) {
  auto e = j.find("error");
  if (e == j.end()) return "failed (no error message)";
  return e->is_string() ? e->get<std::string>() : json_text(*e);
}
}  // namespace

Result<SetupReply> parse_setup_reply(std::string_view line) {
  auto parsed = parse_object(line);
  if (!parsed) return parsed.error();
  const json& j = *parsed;
  auto ok = j.find("ok");
  if (ok == j.end() || !ok->is_boolean())
    return make_error(Errc::parse, "setup reply without a boolean \"ok\"");
  if (!ok->get<bool>()) return make_error(Errc::unavailable, error_text(j));
  SetupReply r;
  auto devices = j.find("devices");
  if (devices == j.end() || !devices->is_object())
    return make_error(Errc::parse, "setup reply without a \"devices\" object");
  for (const auto& [name, n] : devices->items()) {
    auto level = parse_level(name);
    if (!level)
      return make_error(Errc::parse, fmt::format("setup reply: unknown level '{}' in \"devices\" "
                                                 "(expected process, user, slurm or system)",
                                                 name));
    if (n.is_null()) continue;
    if (!n.is_number_integer() || n.get<long long>() < 0)
      return make_error(Errc::parse, fmt::format("setup reply: devices of level '{}' must be a "
                                                 "non-negative integer, got {}",
                                                 name, json_text(n)));
    r.devices[level_index(*level)] = n.get<std::size_t>();
  }
  if (auto c = j.find("context"); c != j.end() && c->is_boolean()) r.context = c->get<bool>();
  if (auto p = j.find("priority"); p != j.end() && p->is_number_integer())
    r.priority = p->get<int>();
  return r;
}

Result<TickReply> parse_tick_reply(std::string_view line, std::string_view accepts) {
  auto parsed = parse_object(line);
  if (!parsed) return parsed.error();
  const json& j = *parsed;
  auto tick = j.find("tick");
  if (tick == j.end() || !tick->is_number_unsigned())
    return make_error(Errc::parse, "tick reply without its \"tick\" number");
  TickReply r;
  r.tick = tick->get<std::uint64_t>();
  auto ok = j.find("ok");
  if (ok == j.end() || !ok->is_boolean()) {
    r.error = "tick reply without a boolean \"ok\"";
    return r;
  }
  if (!ok->get<bool>()) {
    r.error = error_text(j);
    return r;
  }
  auto values = j.find("values");
  if (values == j.end() || !values->is_object()) {
    r.error = "tick reply without a \"values\" object";
    return r;
  }
  for (const auto& [name, v] : values->items()) {
    auto level = parse_level(name);
    if (!level) continue;  // a level the host did not ask for
    if (v.is_object() && v.contains("error") && !v.contains("values"))
      r.values[level_index(*level)] = Result<RawValue>(make_error(Errc::failed, error_text(v)));
    else
      r.values[level_index(*level)] = raw_from_json(v, accepts);
  }
  return r;
}

// ---- the serving side ----

Result<std::vector<Level>> parse_levels(const json& msg) {
  std::vector<Level> out;
  auto levels = msg.find("levels");
  if (levels == msg.end()) return out;
  if (!levels->is_array()) return make_error(Errc::parse, "\"levels\" must be a list of names");
  for (const auto& name : *levels) {
    auto l = name.is_string() ? parse_level(name.get<std::string>()) : std::nullopt;
    if (!l)
      return make_error(Errc::parse, fmt::format("\"levels\": unknown level {}", json_text(name)));
    out.push_back(*l);
  }
  return out;
}

Result<void> parse_tick_request(const json& msg, TickRequest& out) {
  try {
    out.ctx = TickContext{};
    out.ctx.tick = msg.at("tick").get<std::uint64_t>();
    out.ctx.time_s = msg.value("time", 0.0);
    out.ctx.wallclock_s = msg.value("wallclock", 0.0);
    out.ctx.dt_s = msg.value("dt", 0.0);
    auto levels = parse_levels(msg);
    if (!levels) return levels.error();
    out.levels = std::move(*levels);
    out.procs = ProcSnapshot{};
    if (auto c = msg.find("context"); c != msg.end() && c->is_object()) {
      out.procs.total_pids = c->value("total_pids", std::size_t{0});
      std::unordered_map<int, std::uint32_t> index;
      if (auto procs = c->find("procs"); procs != c->end()) {
        for (const auto& p : *procs) {
          PidSample s;
          s.pid = p.at("pid").get<int>();
          s.ppid = p.value("ppid", 0);
          s.uid = p.value("uid", std::uint32_t{0});
          s.set_comm(p.value("comm", std::string()));
          s.cpu_s = p.value("cpu_s", 0.0);
          s.child_cpu_s = p.value("child_cpu_s", 0.0);
          s.cpu_delta_s = p.value("cpu_delta_s", 0.0);
          s.child_cpu_delta_s = p.value("child_cpu_delta_s", 0.0);
          s.rss_bytes = p.value("rss_bytes", std::uint64_t{0});
          s.io_valid = p.value("io_valid", false);
          s.io.read_bytes = p.value("read_bytes", std::uint64_t{0});
          s.io.write_bytes = p.value("write_bytes", std::uint64_t{0});
          s.io.syscr = p.value("syscr", std::uint64_t{0});
          s.io.syscw = p.value("syscw", std::uint64_t{0});
          s.processor = p.value("processor", -1);
          s.num_threads = p.value("num_threads", 0L);
          index[s.pid] = static_cast<std::uint32_t>(out.procs.pids.size());
          out.procs.pids.push_back(s);
        }
      }
      if (auto members = c->find("members"); members != c->end() && members->is_object()) {
        for (const auto& [name, pids] : members->items()) {
          auto l = parse_level(name);
          if (!l || *l == Level::system) continue;
          for (const auto& pid : pids) {
            auto it = index.find(pid.get<int>());
            if (it == index.end()) continue;
            out.procs.members[level_index(*l)].push_back(it->second);
            out.procs.pids[it->second].level_mask |=
                static_cast<std::uint8_t>(1u << level_index(*l));
          }
        }
      }
      out.procs.target_alive = !out.procs.members[level_index(Level::process)].empty();
    }
    out.ctx.procs = &out.procs;
  } catch (const json::exception& e) {
    return make_error(Errc::parse, fmt::format("malformed tick request: {}", e.what()));
  }
  return {};
}

// ---- framing ----

void LineBuffer::feed(std::string_view bytes) {
  if (start_ > 0 && start_ >= buf_.size() / 2) {
    buf_.erase(0, start_);
    start_ = 0;
  }
  buf_.append(bytes);
}

std::optional<std::string> LineBuffer::next() {
  const std::size_t nl = buf_.find('\n', start_ + scanned_);
  if (nl == std::string::npos) {
    scanned_ = buf_.size() - start_;
    if (scanned_ > kMaxLineBytes) overflow_ = true;
    return std::nullopt;
  }
  std::size_t end = nl;
  if (end > start_ && buf_[end - 1] == '\r') --end;
  std::string line = buf_.substr(start_, end - start_);
  start_ = nl + 1;
  scanned_ = 0;
  if (start_ == buf_.size()) {
    buf_.clear();
    start_ = 0;
  }
  return line;
}

void LineBuffer::clear() {
  buf_.clear();
  start_ = scanned_ = 0;
  overflow_ = false;
}

}  // namespace sonde::plugins::protocol
