// A fork server for the launcher's own worker processes.
//
// Every `cohort worker` the launcher starts with fork+exec loads libtorch again: its dynamic
// relocations and static initialisers (operator registration) cost about 0.4 s of CPU per process,
// so on a host with few cores the start of a job of many workers is mostly that, and so is the
// start of every replacement. The spawner is one `cohort spawner` process, exec'd once with the
// workers' environment (thread budgets are read as the libraries load), that forks each worker
// from itself: a worker starts with the libraries already loaded and initialised, in a few
// milliseconds. Python's multiprocessing calls the same design its forkserver.
//
// The spawner is single-threaded when it forks (OpenBLAS stops its pool in its own pthread_atfork
// handler) and runs nothing of a job. A worker is forked through an intermediate process that exits
// at once, so that the worker is re-parented to the launcher, a child subreaper
// (PR_SET_CHILD_SUBREAPER): the launcher waits for it, and reads its exit status, like any child.
// A worker to die with the launcher sets PR_SET_PDEATHSIG once the launcher is its parent.
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cohort/elastic/process.h"

namespace cohort::elastic {

class Spawner {
 public:
  // Starts `executable spawner` (this binary's hidden command) with `env` added to its
  // environment, and makes this process a child subreaper. Throws when it cannot.
  static std::unique_ptr<Spawner> start(const std::string& executable,
                                        const std::map<std::string, std::string>& env);
  // Closes the channel: the spawner exits; the workers it forked are not touched.
  ~Spawner();
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  // What ChildProcess::spawn(options) would start, forked by the spawner: options.executable must
  // be the spawner's; options.env is added to the spawner's environment. The process returned is
  // this process's child. Throws when the spawner does not answer or could not fork.
  ChildProcess spawn(const SpawnOptions& options);

  pid_t pid() const { return server_.pid(); }

 private:
  Spawner(int fd, ChildProcess server, std::string executable);
  int fd_;
  ChildProcess server_;
  std::string executable_;
  std::mutex mu_;
};

// The spawner's side, run by `cohort spawner`: serves the requests on the channel from the
// environment (COHORT_SPAWNER_FD) until it closes; returns nullopt then. In a forked worker it
// returns instead, once the worker's descriptors, environment and signals are set: the command
// line the worker is to run (argv[1..], e.g. {"worker", "--join", ...}).
std::optional<std::vector<std::string>> serve_spawns();

}  // namespace cohort::elastic
