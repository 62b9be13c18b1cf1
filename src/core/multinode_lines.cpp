// The launcher's lines (core/multinode_lines.hpp): task labels split, JSON lines reassembled.
#include "core/multinode_lines.hpp"

#include <cctype>

namespace sonde::multinode {

std::optional<Labeled> split_label(std::string_view line) {
  std::size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  const std::size_t digits = i;
  int task = 0;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])) && i - digits < 9)
    task = task * 10 + (line[i++] - '0');
  if (i == digits || i + 1 >= line.size() + 1 || i >= line.size() || line[i] != ':')
    return std::nullopt;
  ++i;
  if (i < line.size() && line[i] == ' ') ++i;
  return Labeled{task, line.substr(i)};
}

LineAssembler::Step LineAssembler::scan(Scan& s, std::string_view bytes) const {
  using Want = Scan::Want;
  using Token = Scan::Token;
  auto object_on_top = [&] { return (s.objects >> (s.depth - 1)) & 1; };
  auto push = [&](bool object) {
    if (++s.depth > max_depth_) return false;
    const std::uint64_t bit = std::uint64_t{1} << (s.depth - 1);
    s.objects = object ? s.objects | bit : s.objects & ~bit;
    s.want = object ? Want::key_or_close : Want::value_or_close;
    return true;
  };
  auto pop = [&] { s.want = --s.depth == 0 ? Want::end : Want::comma_or_close; };
  // A number's grammar: 0 after '-', 1 after a leading 0, 2 in the integer digits, 3 after '.',
  // 4 in the fraction, 5 after 'e', 6 after the exponent's sign, 7 in the exponent.
  auto number = [&](char c) {
    const bool digit = c >= '0' && c <= '9', e = c == 'e' || c == 'E';
    int next = -1;
    switch (s.number) {
      case 0: next = c == '0' ? 1 : digit ? 2 : -1; break;
      case 1: next = c == '.' ? 3 : e ? 5 : -1; break;
      case 2: next = digit ? 2 : c == '.' ? 3 : e ? 5 : -1; break;
      case 3: next = digit ? 4 : -1; break;
      case 4: next = digit ? 4 : e ? 5 : -1; break;
      case 5: next = c == '+' || c == '-' ? 6 : digit ? 7 : -1; break;
      case 6:
      case 7: next = digit ? 7 : -1; break;
      default: break;
    }
    if (next >= 0) s.number = static_cast<std::uint8_t>(next);
    return next >= 0;
  };
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    switch (s.token) {
      case Token::string:
        if (c == '"') {
          s.token = Token::none;
          s.want = s.key ? Want::colon : Want::comma_or_close;
        } else if (c == '\\') {
          s.token = Token::escape;
        } else if (u < 0x20) {
          return Step::bad;
        }
        continue;
      case Token::escape:
        if (c == 'u') {
          s.token = Token::hex;
          s.at = 4;
        } else if (c != '\0' && std::strchr("\"\\/bfnrt", c)) {
          s.token = Token::string;
        } else {
          return Step::bad;
        }
        continue;
      case Token::hex:
        if (!std::isxdigit(u)) return Step::bad;
        if (--s.at == 0) s.token = Token::string;
        continue;
      case Token::literal:
        if (c != s.literal[s.at]) return Step::bad;
        if (s.literal[++s.at] == '\0') {
          s.token = Token::none;
          s.want = Want::comma_or_close;
        }
        continue;
      case Token::number:
        if (number(c)) continue;
        if (s.number != 1 && s.number != 2 && s.number != 4 && s.number != 7) return Step::bad;
        s.token = Token::none;  // the number ended: `c` is what follows it
        s.want = Want::comma_or_close;
        break;
      case Token::none: break;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    switch (s.want) {
      case Want::object:
        if (c != '{' || !push(true)) return Step::bad;
        break;
      case Want::end: return Step::bad;  // text after the document
      case Want::key_or_close:
        if (c == '}') {
          pop();
          break;
        }
        [[fallthrough]];
      case Want::key:
        if (c != '"') return Step::bad;
        s.token = Token::string;
        s.key = true;
        break;
      case Want::colon:
        if (c != ':') return Step::bad;
        s.want = Want::value;
        break;
      case Want::value_or_close:
        if (c == ']') {
          pop();
          break;
        }
        [[fallthrough]];
      case Want::value:
        if (c == '{' || c == '[') {
          if (!push(c == '{')) return Step::bad;
        } else if (c == '"') {
          s.token = Token::string;
          s.key = false;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
          s.token = Token::number;
          s.number = c == '-' ? 0 : c == '0' ? 1 : 2;
        } else if (c == 't' || c == 'f' || c == 'n') {
          s.token = Token::literal;
          s.literal = c == 't' ? "true" : c == 'f' ? "false" : "null";
          s.at = 1;
        } else {
          return Step::bad;
        }
        break;
      case Want::comma_or_close:
        if (c == ',')
          s.want = object_on_top() ? Want::key : Want::value;
        else if ((c == '}' && object_on_top()) || (c == ']' && !object_on_top()))
          pop();
        else
          return Step::bad;
        break;
    }
  }
  return s.want == Want::end ? Step::closed : Step::open;
}

std::optional<nlohmann::json> LineAssembler::complete(const std::string& text) {
  // Validated: an object, closed at its end, nested at most max_depth_ deep. The parser checks
  // the rest (UTF-8, numbers' range) once.
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  last_bytes_ = text.size();
  if (doc.is_object()) return doc;
  ++garbage_;
  return std::nullopt;
}

std::optional<nlohmann::json> LineAssembler::fresh(int task, std::string_view piece) {
  if (piece.size() > max_document_) {
    ++garbage_;
    return std::nullopt;
  }
  Scan s;
  switch (scan(s, piece)) {
    case Step::closed: return complete(std::string(piece));
    case Step::bad: ++garbage_; return std::nullopt;
    case Step::open: break;
  }
  if (piece.size() > max_fragment_) {
    ++garbage_;
    return std::nullopt;
  }
  fragments_[task] = Fragment{std::string(piece), s};
  return std::nullopt;
}

std::optional<nlohmann::json> LineAssembler::feed(int task, std::string_view piece) {
  // srun --unbuffered delivers a line's newline alone at times: an empty piece adds nothing.
  if (piece.empty()) return std::nullopt;
  try {
    auto it = fragments_.find(task);
    if (it == fragments_.end()) return fresh(task, piece);
    // A piece that is a whole object by itself is the task's next line: the fragment was never
    // continued (its agent's write was cut short).
    Scan alone;
    if (scan(alone, piece) == Step::closed) {
      ++garbage_;
      fragments_.erase(it);
      return fresh(task, piece);
    }
    Fragment& f = it->second;
    const Step step = scan(f.scan, piece);
    const std::size_t total = f.text.size() + piece.size();
    if (step != Step::bad && total > (step == Step::closed ? max_document_ : max_fragment_)) {
      ++garbage_;
      fragments_.erase(it);
      return std::nullopt;
    }
    switch (step) {
      case Step::open: f.text += piece; return std::nullopt;
      case Step::closed: {
        std::string text = std::move(f.text);
        fragments_.erase(it);
        text += piece;
        auto doc = complete(text);
        if (doc) ++reassembled_;
        return doc;
      }
      case Step::bad:
        // The fragment does not continue into this piece: dropped; the piece may start a line.
        ++garbage_;
        fragments_.erase(it);
        return fresh(task, piece);
    }
  } catch (const std::exception&) {  // std::bad_alloc: the line, not the run
    ++garbage_;
    fragments_.erase(task);
  }
  return std::nullopt;
}

}  // namespace sonde::multinode
