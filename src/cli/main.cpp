#include "cli/commands.hpp"

int main(int argc, char** argv) {
  return sonde::cli::run_cli(argc, argv);
}
