#pragma once
// `sonde top`'s rendering to a grid of text lines: the header (CPU bars, memory, load, rates,
// power, one block per GPU with its history), the table's columns and rows. The terminal front
// end (src/cli/top_tui.cpp) draws these lines with curses; `--once` prints them.
#include <optional>
#include <string>
#include <vector>

#include "views/top_model.hpp"

namespace sonde::top {

/// How a line is drawn (colours and attributes are the front end's).
enum class Style { normal, title, cpu, memory, gpu, gpu_lost, plugin, column_header, dim };

struct Line {
  std::string text;  ///< UTF-8, at most `width` code points (when a width is given)
  Style style = Style::normal;
};

/// A table column: its key, title, width (0: the rest of the line) and alignment.
struct Column {
  SortKey key;
  std::string title;
  int width = 0;
  bool right = false;
  int x = 0;  ///< where it starts on the line (set by layout_columns)
};

/// The columns to show for these rows: the optional ones (JOB, CONTAINER, NSPID, GPU figures,
/// plugin fields) only when a row has a value; positions laid out for `width` (0: no limit).
std::vector<Column> layout_columns(const std::vector<DisplayRow>& rows, const ViewState& v,
                                   int width);
/// The column under screen column `x` (click-to-sort).
std::optional<SortKey> column_at(const std::vector<Column>& columns, int x);

/// A MIG device's header line (under its GPU's): profile, instance ids, utilisation ("n/a" where
/// the driver gives none), memory, its processes' count and pids.
std::string mig_line(const status::MigRow& m);
/// The header lines for `width` code points (>= 40).
std::vector<Line> render_header(const Snapshot& s, int width);
/// The column titles, the sort key marked (▼ descending, ▲ ascending).
Line render_column_titles(const std::vector<Column>& columns, const ViewState& v, int width);
/// One table row (width 0: not cut).
Line render_row(const DisplayRow& row, const std::vector<Column>& columns, int width);

/// One screen as text: header, a blank line, titles, every row (`--once`). Width 0: the
/// header laid out for 120 columns and rows not cut.
std::string render_text(const Snapshot& s, const ViewState& v, int width);

/// Text cut or padded to `width` code points (a cut line ends with '…' when `ellipsis`).
std::string fit(const std::string& text, int width, bool right = false, bool ellipsis = false);
/// Number of code points of UTF-8 text.
int text_width(const std::string& text);
/// "1.5G", "340M", "12K", "512B" (four characters or fewer where possible).
std::string short_bytes(double bytes);
/// A bar of `width` cells filled to `percent` with '|' ("[|||||    ]" without the brackets).
std::string bar(double percent, int width);
/// A sparkline of the values (0..100), one block character each, the last `width` of them.
std::string sparkline(const std::vector<double>& values, int width);

}  // namespace sonde::top
