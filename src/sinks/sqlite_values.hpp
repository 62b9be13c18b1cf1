#pragma once
// Pieces shared by the SQLite writer and reader (not part of the public API): statement column
// and bind helpers, the lock wait in ms, and the format of a sample's values (a JSON array of
// numbers and nulls, in the order of `columns.position`).
#include <sqlite3.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sonde::sqlite_detail {

/// `seconds` (clamped to [0, 1 h]) in ms, for sqlite3_busy_timeout.
int busy_ms(double seconds);
/// Column `i` as text ("" for NULL).
std::string column_text(sqlite3_stmt* s, int i);
/// Column `i` as a double, nullopt for NULL.
std::optional<double> column_opt_double(sqlite3_stmt* s, int i);
/// Binds a copy of `text` to parameter `i`.
void bind_text(sqlite3_stmt* s, int i, const std::string& text);
/// Appends the JSON array of a row's values: numbers as in the CSV files, NaN as null.
void append_values(std::string& out, const std::vector<double>& row);
/// Parses what append_values wrote (a flat array of numbers and nulls); false if it is not one.
bool parse_values(std::string_view text, std::vector<double>& out);

}  // namespace sonde::sqlite_detail
