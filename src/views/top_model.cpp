// `sonde top`'s pure functions: filter, sort, group, tree (top_model.hpp).
#include "views/top_model.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace sonde::top {

std::string_view sort_key_name(SortKey k) {
  switch (k) {
    case SortKey::pid: return "PID";
    case SortKey::user: return "USER";
    case SortKey::job: return "JOB";
    case SortKey::container: return "CONTAINER";
    case SortKey::nspid: return "NSPID";
    case SortKey::cpu: return "CPU%";
    case SortKey::mem: return "MEM";
    case SortKey::read: return "READ/s";
    case SortKey::write: return "WRITE/s";
    case SortKey::gpu_mem: return "GPUMEM";
    case SortKey::gpu_sm: return "SM%";
    case SortKey::command: return "COMMAND";
  }
  return "?";
}

std::string_view group_name(GroupBy g) {
  switch (g) {
    case GroupBy::none: return "none";
    case GroupBy::user: return "user";
    case GroupBy::job: return "job";
    case GroupBy::container: return "container";
  }
  return "?";
}

bool descending_by_default(SortKey k) {
  switch (k) {
    case SortKey::pid:
    case SortKey::user:
    case SortKey::job:
    case SortKey::container:
    case SortKey::nspid:
    case SortKey::command: return false;
    default: return true;
  }
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool contains(std::string_view hay, const std::string& needle_lower) {
  return lower(hay).find(needle_lower) != std::string::npos;
}

// A figure for ordering: unknown sorts below every known value.
double figure(const std::optional<double>& v) {
  return v ? *v : -1.0;
}
double figure(const std::optional<std::uint64_t>& v) {
  return v ? static_cast<double>(*v) : -1.0;
}

// <0, 0, >0 in the key's natural (ascending) order.
int compare(const ProcRow& a, const ProcRow& b, SortKey k) {
  auto cmp = [](const auto& x, const auto& y) { return x < y ? -1 : (y < x ? 1 : 0); };
  switch (k) {
    case SortKey::pid: return cmp(a.pid, b.pid);
    case SortKey::user: return cmp(a.user, b.user);
    case SortKey::job: return cmp(a.job, b.job);
    case SortKey::container: return cmp(a.container, b.container);
    case SortKey::nspid: return cmp(a.ns_pid, b.ns_pid);
    case SortKey::cpu: return cmp(figure(a.cpu_percent), figure(b.cpu_percent));
    case SortKey::mem: return cmp(a.mem_bytes(), b.mem_bytes());
    case SortKey::read: return cmp(figure(a.read_bps), figure(b.read_bps));
    case SortKey::write: return cmp(figure(a.write_bps), figure(b.write_bps));
    case SortKey::gpu_mem: return cmp(figure(a.gpu_mem_bytes), figure(b.gpu_mem_bytes));
    case SortKey::gpu_sm: return cmp(figure(a.gpu_sm_percent), figure(b.gpu_sm_percent));
    case SortKey::command: return cmp(a.command, b.command);
  }
  return 0;
}

bool before(const ProcRow& a, const ProcRow& b, const ViewState& v) {
  const int c = compare(a, b, v.sort);
  if (c != 0) return (descending_by_default(v.sort) != v.reverse) ? c > 0 : c < 0;
  return a.pid < b.pid;
}

template <class T>
void add(std::optional<T>& sum, const std::optional<T>& v) {
  if (v) sum = sum.value_or(T{}) + *v;
}

}  // namespace

bool matches(const ProcRow& r, const ViewState& v) {
  if (!v.user_filter.empty() && r.user != v.user_filter) return false;
  if (!v.job_filter.empty() && r.job != v.job_filter) return false;
  if (v.filter.empty()) return true;
  const std::string f = lower(v.filter);
  return std::to_string(r.pid) == v.filter || contains(r.command, f) || contains(r.comm, f) ||
         contains(r.user, f) || contains(r.job, f) || contains(r.container, f);
}

void sort_rows(std::vector<ProcRow>& rows, const ViewState& v) {
  std::sort(rows.begin(), rows.end(),
            [&](const ProcRow& a, const ProcRow& b) { return before(a, b, v); });
}

std::vector<ProcRow> group_rows(const std::vector<ProcRow>& rows, GroupBy by) {
  if (by == GroupBy::none) return rows;
  std::map<std::string, ProcRow> groups;
  for (const auto& r : rows) {
    const std::string& field = by == GroupBy::user  ? r.user
                               : by == GroupBy::job ? r.job
                                                    : r.container;
    const std::string key = field.empty() ? std::string(1, '-') : field;
    auto [it, fresh] = groups.try_emplace(key);
    ProcRow& g = it->second;
    if (fresh) {
      g.pid = r.pid;
      g.count = 0;
      g.cpu_percent.reset();
      if (by == GroupBy::user) {
        g.user = key;
        g.uid = r.uid;
      } else if (by == GroupBy::job) {
        g.job = key;
      } else {
        g.container = key;
      }
    }
    g.pid = std::min(g.pid, r.pid);
    g.count += r.count;
    add(g.cpu_percent, r.cpu_percent);
    g.rss_bytes += r.rss_bytes;
    g.pss_bytes = g.pss_bytes.value_or(0) + r.mem_bytes();
    add(g.read_bps, r.read_bps);
    add(g.write_bps, r.write_bps);
    add(g.gpu_mem_bytes, r.gpu_mem_bytes);
    add(g.gpu_sm_percent, r.gpu_sm_percent);
    for (int i : r.gpus)
      if (std::find(g.gpus.begin(), g.gpus.end(), i) == g.gpus.end()) g.gpus.push_back(i);
  }
  std::vector<ProcRow> out;
  out.reserve(groups.size());
  for (auto& [key, g] : groups) {
    std::sort(g.gpus.begin(), g.gpus.end());
    g.command = g.count == 1 ? "1 process" : std::to_string(g.count) + " processes";
    out.push_back(std::move(g));
  }
  return out;
}

constexpr int kMaxTreeIndent = 32;

std::vector<DisplayRow> tree_rows(std::vector<ProcRow> rows, const ViewState& v) {
  sort_rows(rows, v);
  std::unordered_map<int, std::size_t> index;
  for (std::size_t i = 0; i < rows.size(); ++i) index.emplace(rows[i].pid, i);
  std::unordered_map<int, std::vector<std::size_t>> children;
  std::vector<std::size_t> roots;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const int parent = rows[i].ppid;
    if (parent != rows[i].pid && index.count(parent))
      children[parent].push_back(i);
    else
      roots.push_back(i);
  }
  std::vector<DisplayRow> out;
  out.reserve(rows.size());
  std::vector<bool> done(rows.size(), false);
  // Depth first, iteratively (a deep chain of processes must not overflow the stack).
  struct Item {
    std::size_t i;
    std::string indent;  ///< the continuation of the ancestors' lines
    bool last;
    bool root;
    int depth;
  };
  std::vector<Item> stack;
  for (auto it = roots.rbegin(); it != roots.rend(); ++it)
    stack.push_back({*it, "", false, true, 0});
  // Rows no root reaches (a cycle: a pid reused between two reads) start trees of their own.
  std::size_t next_unreached = 0;
  while (!stack.empty() || next_unreached < rows.size()) {
    if (stack.empty()) {
      if (!done[next_unreached]) stack.push_back({next_unreached, "", false, true, 0});
      ++next_unreached;
      continue;
    }
    Item item = std::move(stack.back());
    stack.pop_back();
    if (done[item.i]) continue;
    done[item.i] = true;
    DisplayRow d;
    d.row = rows[item.i];
    // (append, not operator+: GCC 12's -Wrestrict misfires on a string + a literal here)
    std::string indent;
    if (!item.root) {
      d.tree_prefix = item.indent;
      d.tree_prefix.append(item.last ? "└─ " : "├─ ");
      indent = item.indent;
      // Deeper than kMaxTreeIndent levels the indent stops growing (a chain of thousands of
      // processes would otherwise cost quadratic memory).
      if (item.depth < kMaxTreeIndent) indent.append(item.last ? "   " : "│  ");
    }
    out.push_back(std::move(d));
    auto kids = children.find(rows[item.i].pid);
    if (kids == children.end()) continue;
    const auto& list = kids->second;
    for (std::size_t k = list.size(); k-- > 0;)
      stack.push_back({list[k], indent, k + 1 == list.size(), false, item.depth + 1});
  }
  return out;
}

std::vector<DisplayRow> arrange(const std::vector<ProcRow>& rows, const ViewState& v) {
  const bool all = v.filter.empty() && v.user_filter.empty() && v.job_filter.empty();
  if (v.group != GroupBy::none || v.tree) {
    std::vector<ProcRow> kept;
    kept.reserve(rows.size());
    for (const auto& r : rows)
      if (all || matches(r, v)) kept.push_back(r);
    if (v.group != GroupBy::none) kept = group_rows(kept, v.group);
    if (v.tree && v.group == GroupBy::none) return tree_rows(std::move(kept), v);
    sort_rows(kept, v);
    std::vector<DisplayRow> out;
    out.reserve(kept.size());
    for (auto& r : kept) out.push_back({std::move(r), ""});
    return out;
  }
  // The plain table (the common case, at every refresh): sorted by pointer, each row copied once.
  std::vector<const ProcRow*> kept;
  kept.reserve(rows.size());
  for (const auto& r : rows)
    if (all || matches(r, v)) kept.push_back(&r);
  std::sort(kept.begin(), kept.end(),
            [&](const ProcRow* a, const ProcRow* b) { return before(*a, *b, v); });
  std::vector<DisplayRow> out(kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i) out[i].row = *kept[i];
  return out;
}

std::vector<std::string> split_nul(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\0', start);
    if (end == std::string_view::npos) end = text.size();
    out.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace sonde::top
