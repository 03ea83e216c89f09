// `cohort ps-server --join HOST:PORT --index I`: one parameter server of a job whose sync.mode is
// ssp or async (ps/server.h). Started by `cohort run` beside the workers, or by whatever runs
// processes on a cluster. The job token comes from COHORT_TOKEN or --token-file, never from the
// command line. SIGTERM or SIGINT stop it, also while it is still joining; it ends by itself when
// the job is over (status 0) and when the job declared it lost (status 3).
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/cli/args.h"
#include "cohort/cli/join_flags.h"
#include "cohort/cli/stop_signals.h"
#include "cohort/ps/server.h"

namespace cohort::cli {

// Exit status of a server that fenced itself (the job went on without it).
constexpr int kServerExcluded = 3;

int ps_server_main(int argc, char** argv) {
  Args args(argc, argv, {"join", "index", "token-file", "bind", "port"}, {"help"});
  if (args.has("help") || !args.has("join") || !args.has("index")) {
    (args.has("help") ? std::cout : std::cerr)
        << "usage: cohort ps-server --join HOST:PORT|etcd://HOST:PORT/PREFIX --index I\n"
           "                        [--bind HOST] [--port P] [--token-file F]\n"
           "One parameter server of a job (sync.mode ssp or async): server I of the job's\n"
           "parameter_servers. --bind: where workers reach it (default: the address of the\n"
           "interface that leads to the job's store). The job token is read from COHORT_TOKEN or\n"
           "--token-file.\n";
    return args.has("help") ? 0 : 2;
  }
  const JoinFlags flags = read_join_flags(args, "workers reach this server");
  ps::ServerOptions o;
  o.store = flags.join;
  o.token = flags.token;
  o.bind_host = flags.bind;
  o.index = static_cast<int>(args.get_int("index", -1));
  if (o.index < 0) throw ConfigError("--index: expected a server index >= 0");
  o.port = static_cast<uint16_t>(args.get_int("port", 0));
  // A stop signal (cli/stop_signals.h, whichever thread it lands on) wakes one thread, which stops
  // the server. It runs before the server joins its job, which retries an unreachable store for up
  // to half a minute: a stop asked for meanwhile ends the process at once. It is detached, and
  // what it shares with this thread lives as long as either needs it: this thread may end first
  // (the job is over, and no signal came).
  struct Stopper {
    std::mutex mu;
    ps::Server* running = nullptr;  // under mu: the server a signal stops
    bool ended = false;             // under mu: the server stopped; this process is ending
  };
  auto stopper = std::make_shared<Stopper>();
  handle_stop_signals();
  std::thread([stopper, index = o.index] {
    while (stop_signal() == 0) wait_for_event(std::chrono::seconds(1));
    std::lock_guard lk(stopper->mu);
    if (stopper->running != nullptr) {
      stopper->running->stop();
      return;
    }
    if (stopper->ended) return;
    spdlog::info("parameter server {} stopped ({}) before it had joined its job", index,
                 strsignal(stop_signal()));
    std::_Exit(0);
  }).detach();
  auto server = std::make_unique<ps::Server>(o);
  {
    std::lock_guard lk(stopper->mu);
    stopper->running = server.get();
  }
  const std::string fenced = server->wait();
  {
    std::lock_guard lk(stopper->mu);
    stopper->running = nullptr;
    stopper->ended = true;
  }
  if (fenced.empty()) {
    spdlog::info("parameter server {} stopped", o.index);
    return 0;
  }
  // Fenced: stop serving at once.
  server->stop();
  spdlog::error("parameter server {} left the job: {}", o.index, fenced);
  std::_Exit(kServerExcluded);
}

}  // namespace cohort::cli
