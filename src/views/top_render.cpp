// `sonde top`'s header and table as text lines (top_render.hpp).
#include "views/top_render.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace sonde::top {

int text_width(const std::string& text) {
  int n = 0;
  for (unsigned char ch : text)
    if ((ch & 0xC0) != 0x80) ++n;
  return n;
}

std::string fit(const std::string& text, int width, bool right, bool ellipsis) {
  if (width <= 0) return {};
  const int n = text_width(text);
  if (n <= width) {
    const std::string pad(static_cast<std::size_t>(width - n), ' ');
    return right ? pad + text : text + pad;
  }
  // Cut after `keep` code points.
  const int keep = ellipsis ? width - 1 : width;
  std::size_t i = 0;
  for (int cps = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      if (cps == keep) break;
      ++cps;
    }
  }
  return text.substr(0, i) + (ellipsis ? "…" : "");
}

std::string short_bytes(double b) {
  if (!std::isfinite(b) || b < 0) return "-";
  static const char* units[] = {"B", "K", "M", "G", "T", "P"};
  std::size_t u = 0;
  while (b >= 1024.0 && u + 1 < std::size(units)) {
    b /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f}B", b);
  return b < 10 ? fmt::format("{:.1f}{}", b, units[u]) : fmt::format("{:.0f}{}", b, units[u]);
}

std::string bar(double percent, int width) {
  if (width <= 0) return {};
  const double p = std::isfinite(percent) ? std::clamp(percent, 0.0, 100.0) : 0.0;
  const int fill = static_cast<int>(std::lround(p / 100.0 * width));
  return std::string(static_cast<std::size_t>(fill), '|') +
         std::string(static_cast<std::size_t>(width - fill), ' ');
}

std::string sparkline(const std::vector<double>& values, int width) {
  static const char* blocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  std::string out;
  const std::size_t n = values.size();
  const std::size_t from = n > static_cast<std::size_t>(std::max(width, 0))
                               ? n - static_cast<std::size_t>(std::max(width, 0))
                               : 0;
  for (std::size_t i = from; i < n; ++i) {
    const double v = std::isfinite(values[i]) ? std::clamp(values[i], 0.0, 100.0) : 0.0;
    out += blocks[std::min(7, static_cast<int>(v / 12.5))];
  }
  return out;
}

namespace {

std::string opt_rate(const std::optional<double>& v) {
  return v ? short_bytes(*v) + "/s" : std::string("-");
}

// "label[|||||     text]": a bar with its figure inside, `width` code points in all.
std::string meter(const std::string& label, double percent, const std::string& text, int width) {
  const int inner = width - text_width(label) - 2;
  if (inner <= text_width(text)) return fit(label + "[" + text + "]", width);
  std::string b = bar(percent, inner);
  // The figure replaces the bar's right end.
  const int t = text_width(text);
  b = b.substr(0, static_cast<std::size_t>(inner - t)) + text;
  return label + "[" + b + "]";
}

std::string cell(const DisplayRow& d, SortKey key, bool grouped) {
  const ProcRow& r = d.row;
  switch (key) {
    case SortKey::pid: return std::to_string(grouped ? static_cast<int>(r.count) : r.pid);
    case SortKey::user: return r.user;
    case SortKey::job: return r.job;
    case SortKey::container: return r.container;
    case SortKey::nspid: return r.ns_pid > 0 ? std::to_string(r.ns_pid) : std::string();
    case SortKey::cpu: return r.cpu_percent ? fmt::format("{:.1f}", *r.cpu_percent) : "-";
    case SortKey::mem:
      return short_bytes(static_cast<double>(r.mem_bytes())) + (r.pss_bytes ? "" : "*");
    case SortKey::read: return r.read_bps ? short_bytes(*r.read_bps) : "-";
    case SortKey::write: return r.write_bps ? short_bytes(*r.write_bps) : "-";
    case SortKey::gpu_mem:
      return r.gpu_mem_bytes ? short_bytes(static_cast<double>(*r.gpu_mem_bytes)) : "";
    case SortKey::gpu_sm: return r.gpu_sm_percent ? fmt::format("{:.0f}", *r.gpu_sm_percent) : "";
    case SortKey::command: {
      std::string c = d.tree_prefix + r.command;
      for (const auto& f : r.fields)
        if (f.key != "slurm_job_id" && f.key != "container" && f.key != "k8s_pod")
          c += fmt::format("  {}={}", f.key, f.text);
      return c;
    }
  }
  return {};
}

// Whether cell(d, key, grouped) is not empty, without making it (every row, every refresh).
bool has_cell(const ProcRow& r, SortKey key) {
  switch (key) {
    case SortKey::user: return !r.user.empty();
    case SortKey::job: return !r.job.empty();
    case SortKey::container: return !r.container.empty();
    case SortKey::nspid: return r.ns_pid > 0;
    case SortKey::gpu_mem: return r.gpu_mem_bytes.has_value();
    case SortKey::gpu_sm: return r.gpu_sm_percent.has_value();
    default: return true;
  }
}

}  // namespace

std::string mig_line(const status::MigRow& m) {
  const auto& md = m.device;
  std::string l =
      fmt::format("    └ MIG {:<8} GI {:>2} CI {:>2}", md.profile.empty() ? md.name : md.profile,
                  md.gpu_instance_id ? std::to_string(*md.gpu_instance_id) : "??",
                  md.compute_instance_id ? std::to_string(*md.compute_instance_id) : "??");
  if (md.error) return l + "  " + *md.error;
  // NVML gives no utilisation for a MIG device: "n/a", never 0.
  l += " " + meter(" util", md.util_gpu.value_or(0),
                   md.util_gpu ? fmt::format("{:.0f}%", *md.util_gpu) : "n/a", 18);
  if (md.mem_used_bytes && md.mem_total_bytes && *md.mem_total_bytes > 0)
    l += " " + meter("mem",
                     100.0 * static_cast<double>(*md.mem_used_bytes) /
                         static_cast<double>(*md.mem_total_bytes),
                     short_bytes(static_cast<double>(*md.mem_used_bytes)) + "/" +
                         short_bytes(static_cast<double>(*md.mem_total_bytes)),
                     22);
  else
    l += " mem[" + status::human_bytes(md.mem_used_bytes) + "]";
  if (!m.processes) return l + "  processes: not supported";
  l += fmt::format("  {} proc", m.processes->size());
  std::string pids;
  for (std::size_t k = 0; k < m.processes->size() && k < 8; ++k)
    pids += (pids.empty() ? "" : ",") + std::to_string((*m.processes)[k].pid);
  if (m.processes->size() > 8) pids += ",…";
  if (!pids.empty()) l += " (pid " + pids + ")";
  return l;
}

std::vector<Column> layout_columns(const std::vector<DisplayRow>& rows, const ViewState& v,
                                   int width) {
  const bool grouped = v.group != GroupBy::none;
  struct Spec {
    SortKey key;
    const char* title;
    int width;
    bool right;
    bool optional;
  };
  const Spec specs[] = {
      {SortKey::pid, grouped ? "PROCS" : "PID", 7, true, false},
      {SortKey::user, "USER", 10, false, grouped && v.group != GroupBy::user},
      {SortKey::job, "JOB", 9, false, v.group != GroupBy::job},
      {SortKey::container, "CONTAINER", 19, false, v.group != GroupBy::container},
      {SortKey::nspid, "NSPID", 6, true, true},
      {SortKey::cpu, "CPU%", 6, true, false},
      {SortKey::mem, "MEM", 7, true, false},
      {SortKey::read, "READ/s", 7, true, false},
      {SortKey::write, "WRITE/s", 7, true, false},
      {SortKey::gpu_mem, "GPUMEM", 7, true, true},
      {SortKey::gpu_sm, "SM%", 4, true, true},
  };
  std::vector<Column> cols;
  int x = 0;
  for (const auto& s : specs) {
    if (s.optional) {
      const bool any = std::any_of(rows.begin(), rows.end(),
                                   [&](const DisplayRow& d) { return has_cell(d.row, s.key); });
      if (!any) continue;
    }
    cols.push_back({s.key, s.title, s.width, s.right, x});
    x += s.width + 1;
  }
  cols.push_back({SortKey::command, "COMMAND", 0, false, x});
  // A narrow window: the command keeps at least 12 columns, the optional ones go first.
  while (width > 0 && cols.size() > 4 && x + 12 > width) {
    auto it = std::find_if(cols.begin(), cols.end(), [](const Column& c) {
      return c.key == SortKey::nspid || c.key == SortKey::read || c.key == SortKey::write ||
             c.key == SortKey::container;
    });
    if (it == cols.end()) break;
    cols.erase(it);
    x = 0;
    for (auto& c : cols) {
      c.x = x;
      x += c.width + 1;
    }
  }
  return cols;
}

std::optional<SortKey> column_at(const std::vector<Column>& columns, int x) {
  for (const auto& c : columns)
    if (x >= c.x && (c.width == 0 || x < c.x + c.width + 1)) return c.key;
  return std::nullopt;
}

Line render_column_titles(const std::vector<Column>& columns, const ViewState& v, int width) {
  std::string out;
  for (const auto& c : columns) {
    std::string title = c.title;
    if (c.key == v.sort) {
      const bool desc = descending_by_default(v.sort) != v.reverse;
      title = c.right ? (desc ? "▼" : "▲") + title : title + (desc ? "▼" : "▲");
    }
    if (c.width > 0)
      out += fit(title, c.width, c.right) + " ";
    else
      out += title;
  }
  return {width > 0 ? fit(out, width) : out, Style::column_header};
}

Line render_row(const DisplayRow& row, const std::vector<Column>& columns, int width) {
  const bool grouped = !columns.empty() && columns.front().title == "PROCS";
  std::string out;
  for (const auto& c : columns) {
    const std::string text = cell(row, c.key, grouped);
    if (c.width > 0)
      out += fit(text, c.width, c.right, !c.right) + " ";
    else
      out += text;
  }
  return {width > 0 ? fit(out, width) : out, Style::normal};
}

std::vector<Line> render_header(const Snapshot& s, int width) {
  width = std::max(width, 40);
  std::vector<Line> out;
  auto add = [&](std::string text, Style st) { out.push_back({fit(text, width), st}); };

  std::string title =
      fmt::format("sonde top  {}  {}  {} processes ({} running), {} threads", s.hostname,
                  status::ctime_text(s.time), s.procs.size(), s.running, s.threads);
  if (s.load1 && s.load5 && s.load15)
    title += fmt::format("  load {:.2f} {:.2f} {:.2f}", *s.load1, *s.load5, *s.load15);
  add(title, Style::title);

  // Per-core bars, in as many columns as fit (each at least 24 wide).
  if (!s.cpu_ids.empty()) {
    const int per_line = std::clamp(width / 24, 1, 8);
    const int cell_w = width / per_line;
    std::string line;
    for (std::size_t i = 0; i < s.cpu_ids.size(); ++i) {
      const auto& p = i < s.core_percent.size() ? s.core_percent[i] : std::nullopt;
      const std::string text = p ? fmt::format("{:.1f}%", *p) : std::string("?");
      line += meter(fmt::format("{:>3}", s.cpu_ids[i]), p.value_or(0), text, cell_w - 1) + " ";
      if ((i + 1) % static_cast<std::size_t>(per_line) == 0 || i + 1 == s.cpu_ids.size()) {
        add(line, Style::cpu);
        line.clear();
      }
    }
  }
  // Memory and swap.
  {
    const int half = width / 2;
    std::string mem = "Mem[?]";
    if (s.mem_total_bytes && s.mem_used_bytes && *s.mem_total_bytes > 0)
      mem = meter("Mem", 100.0 * *s.mem_used_bytes / *s.mem_total_bytes,
                  short_bytes(*s.mem_used_bytes) + "/" + short_bytes(*s.mem_total_bytes), half - 1);
    std::string swp = "Swp[-]";
    if (s.swap_total_bytes && s.swap_used_bytes)
      swp = meter("Swp",
                  *s.swap_total_bytes > 0 ? 100.0 * *s.swap_used_bytes / *s.swap_total_bytes : 0,
                  short_bytes(*s.swap_used_bytes) + "/" + short_bytes(*s.swap_total_bytes),
                  width - half - 1);
    add(fit(mem, half) + swp, Style::memory);
  }
  // Rates and power.
  {
    std::string l =
        fmt::format("Net rx {} tx {}   Disk read {} write {}", opt_rate(s.net_rx_bps),
                    opt_rate(s.net_tx_bps), opt_rate(s.disk_read_bps), opt_rate(s.disk_write_bps));
    if (s.cpu_package_power_w || s.gpu_power_w) {
      l += "   Power";
      if (s.cpu_package_power_w) l += fmt::format(" CPU {:.0f} W", *s.cpu_package_power_w);
      if (s.gpu_power_w) l += fmt::format(" GPUs {:.0f} W", *s.gpu_power_w);
    }
    add(l, Style::normal);
  }
  // GPUs: one line each.
  std::size_t name_w = 0;
  for (const auto& g : s.gpus)
    name_w = std::max(name_w, static_cast<std::size_t>(text_width(g.device.name)));
  name_w = std::min<std::size_t>(name_w, 24);
  for (std::size_t i = 0; i < s.gpus.size(); ++i) {
    const auto& d = s.gpus[i].device;
    std::string head = fmt::format("[{}] {}", d.index,
                                   fit(d.name.empty() ? "??" : d.name, static_cast<int>(name_w)));
    if (d.error) {
      add(head + "  " + *d.error, Style::gpu_lost);
      continue;
    }
    // A GPU in MIG mode has no utilisation of its own (the driver's N/A), as its MIG devices.
    const std::string util = d.util_gpu                   ? fmt::format("{:.0f}%", *d.util_gpu)
                             : d.mig_mode.value_or(false) ? "n/a"
                                                          : "??";
    std::string l = head + " " + meter(" util", d.util_gpu.value_or(0), util, 18);
    if (d.mem_used_bytes && d.mem_total_bytes && *d.mem_total_bytes > 0)
      l += " " + meter("mem",
                       100.0 * static_cast<double>(*d.mem_used_bytes) /
                           static_cast<double>(*d.mem_total_bytes),
                       short_bytes(static_cast<double>(*d.mem_used_bytes)) + "/" +
                           short_bytes(static_cast<double>(*d.mem_total_bytes)),
                       22);
    else
      l += " mem[" + status::human_bytes(d.mem_used_bytes) + "]";
    l += fmt::format(" {:>3}°C {:>3}/{:>3} W", status::int_or_unknown(d.temperature_c),
                     status::int_or_unknown(d.power_w), status::int_or_unknown(d.power_limit_w));
    if (i < s.gpu_history.size()) {
      const int room = width - text_width(l) - 2;
      if (room > 0) l += "  " + sparkline(s.gpu_history[i], room);
    }
    add(l, Style::gpu);
    for (const auto& m : s.gpus[i].mig)
      add(mig_line(m), m.device.error ? Style::gpu_lost : Style::gpu);
  }
  if (s.gpus.empty()) {
    std::string why;
    for (const auto& n : s.notes) why += (why.empty() ? "" : "; ") + n;
    add("No GPU found" + (why.empty() ? std::string() : ": " + why), Style::dim);
  }
  for (const auto& l : s.plugin_lines) add(l, Style::plugin);
  return out;
}

std::string render_text(const Snapshot& s, const ViewState& v, int width) {
  std::string out;
  for (const auto& l : render_header(s, width > 0 ? width : 120)) {
    std::string t = l.text;
    while (!t.empty() && t.back() == ' ') t.pop_back();
    out += t + "\n";
  }
  out += "\n";
  const auto rows = arrange(s.procs, v);
  const auto cols = layout_columns(rows, v, width);
  auto trimmed = [](std::string t) {
    while (!t.empty() && t.back() == ' ') t.pop_back();
    return t + "\n";
  };
  out += trimmed(render_column_titles(cols, v, width).text);
  for (const auto& r : rows) out += trimmed(render_row(r, cols, width).text);
  return out;
}

}  // namespace sonde::top
