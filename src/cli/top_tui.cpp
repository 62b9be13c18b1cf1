// `sonde top`'s terminal front end (top_tui.hpp): curses (ncursesw), one poll over the keyboard and
// the SignalGuard's signalfd, a refresh every interval.
#include "cli/top_tui.hpp"

#define NCURSES_NOMACROS 1  // curses functions, not macros (move, erase, refresh)
#include <curses.h>
#include <langinfo.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <clocale>
#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "core/fs.hpp"
#include "core/sampler.hpp"
#include "views/top_render.hpp"

namespace sonde::cli {
namespace {

using top::Line;
using top::Style;

constexpr int kEsc = 27;

const char* const kHelp[] = {
    "sonde top: keys",
    "",
    "  q, F10          quit",
    "  h, ?, F1        this help (any key closes it)",
    "  Up/Down, PgUp/PgDn, Home/End   move the selection",
    "  /               filter: pid, user, job, container or command line (Esc clears)",
    "  <, >            sort by the column left/right of the current one",
    "  F6              sort by the next column",
    "  I               invert the sort order",
    "  t, F5           tree of processes",
    "  u               only one user's processes (empty: all)",
    "  j               only one Slurm job's processes (empty: all)",
    "  g               group by: none, user, job, container",
    "  k, F9           send a signal to the selected process (asks first)",
    "  e               command line and environment of the selected process",
    "  mouse           click a column title to sort by it (again: invert), a row to select it",
    "",
    "  MEM is the proportional set size (shared pages counted once); '*': RSS, where",
    "  smaps_rollup is not readable. CPU% is over the refresh interval (100: one core).",
};

// Non-UTF-8 terminals: ASCII for the glyphs the renderer uses.
std::string to_ascii(const std::string& s) {
  static const std::pair<const char*, const char*> glyphs[] = {
      {"├─ ", "|- "}, {"└─ ", "`- "}, {"│  ", "|  "}, {"▼", "v"}, {"▲", "^"},
      {"°C", "C"},    {"…", "~"},     {"▁", "_"},     {"▂", "."}, {"▃", "-"},
      {"▄", "="},     {"▅", "+"},     {"▆", "*"},     {"▇", "#"}, {"█", "@"}};
  std::string out = s;
  for (const auto& [from, to] : glyphs) {
    for (std::size_t at = out.find(from); at != std::string::npos; at = out.find(from, at))
      out.replace(at, std::strlen(from), to), at += std::strlen(to);
  }
  std::string ascii;
  for (unsigned char c : out) {
    if (c < 0x80)
      ascii += static_cast<char>(c);
    else if ((c & 0xC0) != 0x80)
      ascii += '?';
  }
  return ascii;
}

// curses is started and ended once; the destructor restores the terminal on every way out.
class Screen {
 public:
  explicit Screen(bool color) {
    std::setlocale(LC_ALL, "");
    utf8_ = std::strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
    initscr();
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    nodelay(stdscr, TRUE);
    set_escdelay(25);
    curs_set(0);
    mousemask(BUTTON1_PRESSED | BUTTON1_CLICKED, nullptr);
    mouseinterval(0);
    color_ = color && has_colors();
    if (color_) {
      start_color();
      use_default_colors();
      init_pair(1, COLOR_GREEN, -1);
      init_pair(2, COLOR_YELLOW, -1);
      init_pair(3, COLOR_CYAN, -1);
      init_pair(4, COLOR_RED, -1);
      init_pair(5, COLOR_MAGENTA, -1);
      init_pair(6, COLOR_BLACK, COLOR_GREEN);
      init_pair(7, COLOR_BLUE, -1);
    }
  }
  ~Screen() {
    curs_set(1);
    endwin();
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  int attr(Style s) const {
    if (!color_) {
      switch (s) {
        case Style::title: return A_BOLD;
        case Style::column_header: return A_REVERSE;
        case Style::gpu_lost: return A_BOLD;
        default: return A_NORMAL;
      }
    }
    switch (s) {
      case Style::title: return A_BOLD;
      case Style::cpu: return COLOR_PAIR(1);
      case Style::memory: return COLOR_PAIR(2);
      case Style::gpu: return COLOR_PAIR(3);
      case Style::gpu_lost: return COLOR_PAIR(4) | A_BOLD;
      case Style::plugin: return COLOR_PAIR(5);
      case Style::column_header: return COLOR_PAIR(6);
      case Style::dim: return COLOR_PAIR(7);
      default: return A_NORMAL;
    }
  }
  void put(int y, const std::string& text, int attrs) const {
    const std::string t = utf8_ ? text : to_ascii(text);
    attrset(attrs);
    mvaddnstr(y, 0, t.c_str(), static_cast<int>(t.size()));
    clrtoeol();
    attrset(A_NORMAL);
  }

 private:
  bool utf8_ = true;
  bool color_ = false;
};

enum class Mode { table, help, filter, user, job, confirm_kill, info };

class Tui {
 public:
  Tui(top::Collector& collector, top::ViewState view, const TopTuiOptions& o)
      : collector_(collector), view_(std::move(view)), o_(o) {}

  int run() {
    SignalGuard signals(/*with_sigchld=*/false);  // SIGINT/SIGTERM/SIGHUP: a clean end
    Screen screen(o_.color);
    screen_ = &screen;
    snap_ = collector_.collect();
    // The first CPU figures need a second reading: soon, then every interval.
    double next = monotonic_now() + std::min(o_.interval_s, 0.5);
    bool quit = false;
    while (!quit) {
      arrange();
      draw();
      const int wait_ms = std::max(0, static_cast<int>((next - monotonic_now()) * 1000.0));
      pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {signals.fd(), POLLIN, 0}};
      const int rc = ::poll(fds, 2, wait_ms);
      if (rc > 0 && (fds[1].revents & POLLIN)) {
        signalfd_siginfo si{};
        [[maybe_unused]] auto n = ::read(signals.fd(), &si, sizeof si);
        break;  // SIGINT, SIGTERM or SIGHUP
      }
      for (int ch = getch(); ch != ERR && !quit; ch = getch()) quit = key(ch);
      if (monotonic_now() >= next) {
        snap_ = collector_.collect();
        next = std::max(next + o_.interval_s, monotonic_now() + 0.05);
      }
    }
    screen_ = nullptr;
    return 0;
  }

 private:
  void arrange() {
    rows_ = top::arrange(snap_.procs, view_);
    cols_ = top::layout_columns(rows_, view_, COLS);
    // The selection follows its process (or group) across refreshes and re-sorts.
    if (selected_pid_ != 0) {
      for (std::size_t i = 0; i < rows_.size(); ++i)
        if (rows_[i].row.pid == selected_pid_) {
          selected_ = static_cast<int>(i);
          break;
        }
    }
    selected_ = std::clamp(selected_, 0, std::max(0, static_cast<int>(rows_.size()) - 1));
    if (!rows_.empty()) selected_pid_ = rows_[static_cast<std::size_t>(selected_)].row.pid;
  }

  int table_top() const { return header_lines_ + 1; }  // the titles' line, then the rows
  int table_rows() const { return std::max(1, LINES - table_top() - 2); }

  void draw() {
    erase();
    if (mode_ == Mode::help) {
      int y = 0;
      for (const char* l : kHelp) {
        screen_->put(y, top::fit(l, COLS), y == 0 ? A_BOLD : A_NORMAL);
        ++y;
      }
      refresh();
      return;
    }
    if (mode_ == Mode::info) {
      for (int y = 0; y < LINES - 1 && static_cast<std::size_t>(y + info_scroll_) < info_.size();
           ++y)
        screen_->put(y, top::fit(info_[static_cast<std::size_t>(y + info_scroll_)], COLS),
                     y + info_scroll_ == 0 ? A_BOLD : A_NORMAL);
      screen_->put(LINES - 1, top::fit("Up/Down, PgUp/PgDn, Home/End: scroll   q, Esc: back", COLS),
                   A_REVERSE);
      refresh();
      return;
    }
    const auto header = top::render_header(snap_, COLS);
    header_lines_ = std::min(static_cast<int>(header.size()), std::max(0, LINES - 4));
    for (int y = 0; y < header_lines_; ++y)
      screen_->put(y, header[static_cast<std::size_t>(y)].text,
                   screen_->attr(header[static_cast<std::size_t>(y)].style));
    const Line titles = top::render_column_titles(cols_, view_, COLS);
    screen_->put(table_top(), titles.text, screen_->attr(Style::column_header));
    // Rows: keep the selection in view.
    const int n = table_rows();
    if (selected_ < scroll_) scroll_ = selected_;
    if (selected_ >= scroll_ + n) scroll_ = selected_ - n + 1;
    scroll_ = std::clamp(scroll_, 0, std::max(0, static_cast<int>(rows_.size()) - n));
    for (int i = 0; i < n; ++i) {
      const int r = scroll_ + i;
      if (r >= static_cast<int>(rows_.size())) break;
      const Line l = top::render_row(rows_[static_cast<std::size_t>(r)], cols_, COLS);
      screen_->put(table_top() + 1 + i, top::fit(l.text, COLS), r == selected_ ? A_REVERSE : 0);
    }
    screen_->put(LINES - 1, top::fit(bottom_line(), COLS), A_REVERSE);
    refresh();
  }

  std::string bottom_line() const {
    switch (mode_) {
      case Mode::filter: return "Filter: " + view_.filter + "_   (Enter: keep, Esc: clear)";
      case Mode::user: return "User (empty: all): " + input_ + "_";
      case Mode::job: return "Slurm job (empty: all): " + input_ + "_";
      case Mode::confirm_kill:
        return fmt::format("Send {} to {} ({})? y: yes  9: SIGKILL instead  other key: no",
                           sigabbrev(kill_signal_), kill_pid_, kill_command_);
      default: break;
    }
    std::string s = message_.empty() ? "h:help  q:quit  /:filter  </>:sort  t:tree  u:user  "
                                       "j:job  g:group  k:signal  e:environment"
                                     : message_;
    std::string state;
    if (!view_.filter.empty()) state += " filter=" + view_.filter;
    if (!view_.user_filter.empty()) state += " user=" + view_.user_filter;
    if (!view_.job_filter.empty()) state += " job=" + view_.job_filter;
    if (view_.group != top::GroupBy::none)
      state += " group=" + std::string(top::group_name(view_.group));
    if (view_.tree) state += " tree";
    if (o_.readonly) state += " readonly";
    return s + (state.empty() ? "" : "   [" + state.substr(1) + "]");
  }

  static std::string sigabbrev(int sig) {
    switch (sig) {
      case SIGTERM: return "SIGTERM";
      case SIGKILL: return "SIGKILL";
      default: return fmt::format("signal {}", sig);
    }
  }

  const top::ProcRow* selected() const {
    if (rows_.empty()) return nullptr;
    return &rows_[static_cast<std::size_t>(selected_)].row;
  }

  void select_step(int delta) {
    selected_ = std::clamp(selected_ + delta, 0, std::max(0, static_cast<int>(rows_.size()) - 1));
    if (!rows_.empty()) selected_pid_ = rows_[static_cast<std::size_t>(selected_)].row.pid;
  }

  void sort_by(top::SortKey k) {
    if (view_.sort == k)
      view_.reverse = !view_.reverse;
    else {
      view_.sort = k;
      view_.reverse = false;
    }
  }

  void sort_step(int delta) {
    if (cols_.empty()) return;
    int at = 0;
    for (std::size_t i = 0; i < cols_.size(); ++i)
      if (cols_[i].key == view_.sort) at = static_cast<int>(i);
    const int n = static_cast<int>(cols_.size());
    view_.sort = cols_[static_cast<std::size_t>(((at + delta) % n + n) % n)].key;
    view_.reverse = false;
  }

  void start_kill() {
    const top::ProcRow* r = selected();
    if (r == nullptr) return;
    if (o_.readonly) {
      message_ = "k: refused: sonde top runs with --readonly";
      return;
    }
    if (view_.group != top::GroupBy::none) {
      message_ = "k: select a process, not a group (g: group by none)";
      return;
    }
    if (::geteuid() != 0 && r->uid != ::getuid()) {
      message_ = fmt::format("k: refused: process {} belongs to {}, not to you", r->pid, r->user);
      return;
    }
    kill_pid_ = r->pid;
    kill_start_ = r->starttime_ticks;
    kill_command_ = top::fit(r->command, 40, false, true);
    while (!kill_command_.empty() && kill_command_.back() == ' ') kill_command_.pop_back();
    kill_signal_ = SIGTERM;
    mode_ = Mode::confirm_kill;
  }

  void do_kill() {
    // Still the same process (not a pid reused since it was selected)?
    bool same = false;
    for (const auto& p : snap_.procs)
      if (p.pid == kill_pid_ && p.starttime_ticks == kill_start_) same = true;
    if (!same) {
      message_ = fmt::format("k: process {} is gone", kill_pid_);
      return;
    }
    if (::kill(kill_pid_, kill_signal_) == 0)
      message_ = fmt::format("sent {} to {}", sigabbrev(kill_signal_), kill_pid_);
    else
      message_ =
          fmt::format("k: {} to {}: {}", sigabbrev(kill_signal_), kill_pid_, std::strerror(errno));
  }

  void show_info() {
    const top::ProcRow* r = selected();
    if (r == nullptr || view_.group != top::GroupBy::none) return;
    info_.clear();
    info_scroll_ = 0;
    const std::string dir = fmt::format("/proc/{}", r->pid);
    info_.push_back(fmt::format("process {}  user {}  job {}  container {}", r->pid, r->user,
                                r->job.empty() ? "-" : r->job,
                                r->container.empty() ? "-" : r->container));
    info_.push_back("");
    info_.push_back("command line:");
    if (auto cmd = read_file(dir + "/cmdline"))
      for (const auto& a : top::split_nul(*cmd)) info_.push_back("  " + a);
    info_.push_back("");
    info_.push_back("environment:");
    if (auto env = read_file(dir + "/environ")) {
      for (const auto& a : top::split_nul(*env)) info_.push_back("  " + a);
    } else {
      info_.push_back("  not readable: " + env.error().message);
    }
    mode_ = Mode::info;
  }

  // Text input of the filter, user and job prompts; true when it ended (Enter or Esc).
  bool edit(std::string& text, int ch, bool& accepted) {
    if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
      accepted = true;
      return true;
    }
    if (ch == kEsc) {
      accepted = false;
      return true;
    }
    if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
      if (!text.empty()) {
        // Back over one UTF-8 character.
        std::size_t i = text.size() - 1;
        while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
        text.erase(i);
      }
    } else if (ch >= 32 && ch < 256 && ch != 127) {
      text += static_cast<char>(ch);
    }
    return false;
  }

  // One key; true to quit.
  bool key(int ch) {
    if (ch == KEY_RESIZE) return false;  // the next draw uses the new LINES and COLS
    bool accepted = false;
    switch (mode_) {
      case Mode::help: mode_ = Mode::table; return false;
      case Mode::info: {
        const int last = std::max(0, static_cast<int>(info_.size()) - (LINES - 1));
        const int page = std::max(1, LINES - 2);
        if (ch == KEY_UP)
          info_scroll_ -= 1;
        else if (ch == KEY_DOWN)
          info_scroll_ += 1;
        else if (ch == KEY_PPAGE)
          info_scroll_ -= page;
        else if (ch == KEY_NPAGE)
          info_scroll_ += page;
        else if (ch == KEY_HOME)
          info_scroll_ = 0;
        else if (ch == KEY_END)
          info_scroll_ = last;
        else if (ch == 'q' || ch == kEsc || ch == 'e')
          mode_ = Mode::table;
        info_scroll_ = std::clamp(info_scroll_, 0, last);
        return false;
      }
      case Mode::filter:
        if (edit(view_.filter, ch, accepted)) {
          if (!accepted) view_.filter.clear();
          mode_ = Mode::table;
        }
        return false;
      case Mode::user:
      case Mode::job:
        if (edit(input_, ch, accepted)) {
          if (accepted) (mode_ == Mode::user ? view_.user_filter : view_.job_filter) = input_;
          mode_ = Mode::table;
        }
        return false;
      case Mode::confirm_kill:
        mode_ = Mode::table;
        if (ch == 'y' || ch == 'Y') {
          do_kill();
        } else if (ch == '9') {
          kill_signal_ = SIGKILL;
          mode_ = Mode::confirm_kill;
        } else {
          message_ = "k: cancelled";
        }
        return false;
      case Mode::table: break;
    }
    message_.clear();
    const int page = table_rows();
    switch (ch) {
      case 'q':
      case KEY_F(10): return true;
      case 'h':
      case '?':
      case KEY_F(1): mode_ = Mode::help; break;
      case '/': mode_ = Mode::filter; break;
      case '<': sort_step(-1); break;
      case '>':
      case KEY_F(6): sort_step(1); break;
      case 'I': view_.reverse = !view_.reverse; break;
      case 't':
      case KEY_F(5): view_.tree = !view_.tree; break;
      case 'u':
        input_ = view_.user_filter.empty() && selected() ? selected()->user : std::string();
        mode_ = Mode::user;
        break;
      case 'j':
        input_ = view_.job_filter.empty() && selected() ? selected()->job : std::string();
        mode_ = Mode::job;
        break;
      case 'g':
        view_.group = static_cast<top::GroupBy>((static_cast<int>(view_.group) + 1) % 4);
        selected_pid_ = 0;
        selected_ = 0;
        break;
      case 'k':
      case KEY_F(9): start_kill(); break;
      case 'e': show_info(); break;
      case KEY_UP: select_step(-1); break;
      case KEY_DOWN: select_step(1); break;
      case KEY_PPAGE: select_step(-page); break;
      case KEY_NPAGE: select_step(page); break;
      case KEY_HOME: select_step(-static_cast<int>(rows_.size())); break;
      case KEY_END: select_step(static_cast<int>(rows_.size())); break;
      case KEY_MOUSE: mouse(); break;
      default: break;
    }
    return false;
  }

  void mouse() {
    MEVENT ev{};
    if (getmouse(&ev) != OK) return;
    if (ev.y == table_top()) {
      if (auto k = top::column_at(cols_, ev.x)) sort_by(*k);
    } else if (ev.y > table_top() && ev.y < LINES - 1) {
      select_step(scroll_ + (ev.y - table_top() - 1) - selected_);
    }
  }

  top::Collector& collector_;
  top::ViewState view_;
  TopTuiOptions o_;
  Screen* screen_ = nullptr;
  top::Snapshot snap_;
  std::vector<top::DisplayRow> rows_;
  std::vector<top::Column> cols_;
  Mode mode_ = Mode::table;
  int header_lines_ = 0;
  int selected_ = 0, scroll_ = 0;
  int selected_pid_ = 0;
  std::string input_, message_;
  int kill_pid_ = 0, kill_signal_ = SIGTERM;
  std::uint64_t kill_start_ = 0;
  std::string kill_command_;
  std::vector<std::string> info_;
  int info_scroll_ = 0;
};

}  // namespace

int run_top_tui(top::Collector& collector, top::ViewState view, const TopTuiOptions& options) {
  Tui tui(collector, std::move(view), options);
  return tui.run();
}

}  // namespace sonde::cli
