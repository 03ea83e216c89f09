// The `cohort` binary: one entry point, one subcommand per file.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/cli/commands.h"
#include "cohort/elastic/spawner.h"

namespace {

void usage(std::ostream& os) {
  os << "usage: cohort <command> [options]\n\n"
        "commands:\n"
        "  run JOB.yaml      run a training job (when built with libtorch)\n"
        "  status [URL]      show a running job's console in the terminal\n"
        "  serve             the console of every job on this machine, with their history\n"
        "  submit JOB.yaml   queue a job with cohort serve; jobs, cancel JOB, logs JOB\n"
        "  bench allreduce   measure collectives across local processes\n"
        "  trace merge DIR   merge a job's per-rank timelines into DIR/trace.json\n"
        "  diagnose DIR      where a run's steps went, stragglers, and what to change\n"
        "  calibrate JOB     measure this machine and a job for the simulator\n"
        "  simulate JOB      predict a job's step time and scaling at any number of workers\n"
        "  logs DIR          a run's logs, every rank's merged in time order (--rank R)\n"
        "  version           print the version\n"
        "\nRun 'cohort <command> --help' for a command's options.\n";
}

int run_command(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  try {
    for (const auto& c : cohort::cli::commands()) {
      if (cmd == c.name) return c.run(argc - 1, argv + 1);
    }
    if (cmd == "version" || cmd == "--version") {
      std::cout << "cohort 0.1.0\n";
      return 0;
    }
    std::cerr << "cohort: unknown command '" << cmd << "'\n";
    usage(std::cerr);
    return 2;
  } catch (const cohort::ConfigError& e) {
    std::cerr << "cohort " << cmd << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "cohort " << cmd << ": error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The launcher's fork server (cohort/elastic/spawner.h): in a worker it forked, what follows
  // runs the worker's command line instead (the log is set up there, on the worker's stderr).
  std::vector<std::string> forked;
  std::vector<char*> forked_argv;
  if (argc == 2 && !std::strcmp(argv[1], "spawner")) {
    try {
      auto args = cohort::elastic::serve_spawns();
      if (!args) return 0;
      forked = std::move(*args);
    } catch (const std::exception& e) {
      std::cerr << "cohort spawner: " << e.what() << "\n";
      return 1;
    }
    forked.insert(forked.begin(), argv[0]);
    for (auto& a : forked) forked_argv.push_back(a.data());
    forked_argv.push_back(nullptr);
    argc = static_cast<int>(forked.size());
    argv = forked_argv.data();
  }
  cohort::log::init();
  const int rc = run_command(argc, argv);
  if (!forked.empty()) {
    // A forked worker shares its pages with the spawner until it writes them: the destructors
    // of libtorch's statics (deregistering every operator) would copy most of them only to exit.
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    spdlog::shutdown();
    ::_exit(rc);
  }
  return rc;
}
