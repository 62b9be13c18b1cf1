#pragma once
// The launcher's lines as the multi-node head reads them (docs/multinode.md): the task label of
// each line (`srun --label`: "K: <line>") and the agents' JSON lines reassembled from the pieces
// the launcher delivers, their grammar checked as the bytes come.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/multinode_checks.hpp"

namespace sonde::multinode {

/// "K: text" (srun --label; K may be padded with spaces): the task index and the text after ": ".
struct Labeled {
  int task = -1;
  std::string_view text;
};
std::optional<Labeled> split_label(std::string_view line);

/// Reassembles one task's JSON lines from labeled pieces. A piece that completes a JSON object
/// (alone, or appended to the task's pending fragment) is returned; a piece that is the start of
/// one is kept as the fragment until a later piece closes it, at most `max_fragment` bytes; a
/// piece that is by itself a whole object while a fragment is pending drops the fragment (it was
/// not continued). Anything else is garbage, counted and dropped: documents nested deeper than
/// `max_depth` or longer than `max_document` bytes included. Linear in the bytes received: each
/// task's fragment keeps its validator's state (what comes next, nesting, inside a string) and is
/// parsed once, when its top-level object closes: its grammar is checked as the bytes come, so a
/// fragment that a piece does not continue is dropped at that piece. Never throws.
class LineAssembler {
 public:
  explicit LineAssembler(std::size_t max_fragment = std::size_t{1} << 20,
                         std::size_t max_document = std::size_t{1} << 20,
                         int max_depth = kMaxLineDepth)
      : max_fragment_(max_fragment),
        max_document_(max_document),
        max_depth_(std::clamp(max_depth, 1, 64)) {}
  std::optional<nlohmann::json> feed(int task, std::string_view piece);
  std::uint64_t garbage() const { return garbage_; }
  std::uint64_t reassembled() const { return reassembled_; }
  std::size_t pending() const { return fragments_.size(); }
  /// The bytes of the last document returned (its pieces together).
  std::size_t last_bytes() const { return last_bytes_; }

 private:
  /// Where a JSON text stands after the bytes validated so far: a push-down automaton of
  /// JSON's grammar (UTF-8 and numbers' range are left to the parse at the close).
  struct Scan {
    enum class Want : std::uint8_t {
      object,
      key_or_close,
      key,
      colon,
      value_or_close,
      value,
      comma_or_close,
      end
    };
    enum class Token : std::uint8_t { none, string, escape, hex, number, literal };
    Want want = Want::object;
    Token token = Token::none;
    bool key = false;          ///< the string read is an object's key
    std::uint8_t at = 0;       ///< hex digits left; characters of the literal matched
    std::uint8_t number = 0;   ///< where in a number's grammar
    const char* literal = "";  ///< "true", "false" or "null"
    int depth = 0;
    std::uint64_t objects = 0;  ///< bit d: the container at depth d + 1 is an object
  };
  enum class Step { open, closed, bad };
  Step scan(Scan& s, std::string_view bytes) const;
  std::optional<nlohmann::json> fresh(int task, std::string_view piece);
  std::optional<nlohmann::json> complete(const std::string& text);
  struct Fragment {
    std::string text;
    Scan scan;
  };
  std::size_t max_fragment_, max_document_;
  int max_depth_;
  std::unordered_map<int, Fragment> fragments_;
  std::uint64_t garbage_ = 0, reassembled_ = 0;
  std::size_t last_bytes_ = 0;
};

}  // namespace sonde::multinode
