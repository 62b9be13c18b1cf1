#pragma once
// When a process's Pss (smaps_rollup, a walk of its page tables) is read again, and what it is
// between two reads: the rules the recorder (core/proc_scanner.cpp, per scan) and `sonde top`
// (views/top_collect.cpp, per refresh) share. Each adds its own periodic re-read of an idle
// process on top (the recorder by age, top by a turn staggered over the pids).
#include <algorithm>
#include <cstdint>

namespace sonde::pss {

/// Reads of a process's Pss are spaced by one scan per this much of its resident size.
constexpr std::uint64_t kUnitBytes = 32ull << 20;
/// A process with at most this much resident file-backed and shmem memory (its libraries, for
/// most) has little whose share others could change: an idle one is re-read less often, every
/// kFewSharedEvery scans.
constexpr std::uint64_t kSharedFew = 16ull << 20;
constexpr std::uint64_t kFewSharedEvery = 32;

/// The last read and what it was read against (statm's resident and anonymous bytes, the page
/// faults). `stale`: a child appeared or went since (a fork shares the parent's pages).
struct Mark {
  bool valid = false, stale = false;
  std::uint64_t bytes = 0, at = 0, faults = 0, rss_bytes = 0, anon_bytes = 0;
};

/// Scans between two reads of a process of `rss_bytes` resident (at least 1).
inline std::uint64_t unit(std::uint64_t rss_bytes) {
  return std::max<std::uint64_t>(1, rss_bytes / kUnitBytes);
}

/// Whether its file-backed and shmem resident memory is more than kSharedFew.
inline bool shares_much(std::uint64_t rss_bytes, std::uint64_t anon_bytes) {
  return rss_bytes - std::min(rss_bytes, anon_bytes) > kSharedFew;
}

/// Due now (scan `now`) for a reason other than age: never read; stale and an eighth of its unit
/// passed; its memory moved (faults, exact resident size) and its unit passed.
inline bool due_for_change(const Mark& m, std::uint64_t now, std::uint64_t faults,
                           std::uint64_t rss_bytes) {
  if (!m.valid) return true;
  const std::uint64_t u = unit(rss_bytes);
  const std::uint64_t gap = now - std::min(now, m.at);
  const bool moved = faults != m.faults || rss_bytes != m.rss_bytes;
  return (m.stale && gap >= std::max<std::uint64_t>(1, u / 8)) || (moved && gap >= u);
}

/// Between reads: the last Pss plus the anonymous resident memory gained or lost since (its own:
/// a fork shows as a child), within [0, resident size]. File-backed and shmem pages it mapped
/// since, maybe shared, count from the next read.
inline std::uint64_t estimate(const Mark& m, std::uint64_t rss_bytes, std::uint64_t anon_bytes) {
  const auto est = static_cast<std::int64_t>(m.bytes) + (static_cast<std::int64_t>(anon_bytes) -
                                                         static_cast<std::int64_t>(m.anon_bytes));
  return std::min<std::uint64_t>(rss_bytes,
                                 static_cast<std::uint64_t>(std::max<std::int64_t>(0, est)));
}

}  // namespace sonde::pss
