// Registry of `cohort` subcommands. Each subcommand lives in its own file and adds itself here.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace cohort::cli {

struct Command {
  std::string name;
  std::string summary;
  std::function<int(int argc, char** argv)> run;  // argv[0] is the command name
};

const std::vector<Command>& commands();

}  // namespace cohort::cli
