#pragma once
// A signal as a test parameter, printed by name in gtest's test names and messages.
#include <ostream>

namespace sonde::test {

struct SignalCase {
  int signum;
  const char* name;
};

inline void PrintTo(const SignalCase& c, std::ostream* os) {
  *os << c.name;
}

}  // namespace sonde::test
