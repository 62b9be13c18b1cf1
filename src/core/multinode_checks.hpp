#pragma once
// What the multi-node head takes from an agent (docs/multinode.md, "Bounds"): the bounds on a
// line, the column names a node may send, the types of the fields the head reads, and text from
// an agent made safe to show.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/level.hpp"

namespace sonde::multinode {

/// Bounds on what the head takes from an agent (docs/multinode.md, "Bounds"): a line nested
/// deeper is garbage before it is parsed (nlohmann's copy and dump recurse); a ready line whose
/// node_info or columns pass these refuses its node.
inline constexpr int kMaxLineDepth = 32;
inline constexpr std::size_t kMaxNodeInfoBytes = std::size_t{64} << 10;
inline constexpr std::size_t kMaxColumnsPerLevel = 4096;
inline constexpr std::size_t kMaxColumnName = 128;

/// A column name a node may send: [A-Za-z_][A-Za-z0-9_]*, at most kMaxColumnName bytes, not
/// `time` or `wallclock` (the CSV's own columns). What every CSV header and SQLite table can hold
/// as it is.
bool is_valid_column_name(std::string_view name);

/// Why a parsed agent line cannot be used: a field the head reads has the wrong type ("" when
/// every one is right). Every field is checked here, before any of them is used.
std::string line_fault(const nlohmann::json& doc, const std::vector<Level>& levels);

/// Text from outside (an agent's error or end reason, srun's words) as one line of printable
/// UTF-8 of at most `max` bytes, for a message, the manifest and the terminal: control
/// characters (C0, DEL, C1: a terminal's escapes) and bytes that are not UTF-8 become '?'.
std::string printable(std::string_view s, std::size_t max = 300);

/// A name from outside as a message shows it: quoted, printable ASCII, other bytes as \xHH, at
/// most 64 bytes of it.
std::string shown(std::string_view s);

}  // namespace sonde::multinode
