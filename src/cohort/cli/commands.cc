#include "cohort/cli/commands.h"

namespace cohort::cli {

// Subcommand entry points, defined in their own files.
int bench_main(int argc, char** argv);

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"bench", "measure collectives across local processes", bench_main},
  };
  return kCommands;
}

}  // namespace cohort::cli
