// `cohort ps-server --join HOST:PORT --index I`: one parameter server of a job whose sync.mode is
// ssp or async (ps/server.h). Started by `cohort run` beside the workers, or by whatever runs
// processes on a cluster. The job token comes from COHORT_TOKEN or --token-file, never from the
// command line. SIGTERM or SIGINT stop it; a server the job declared lost stops by itself
// (exit status 3).
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/cli/args.h"
#include "cohort/cli/join_flags.h"
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
  // The stop signals go to one thread, which stops the server; every other thread blocks them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ps::Server server(o);
  std::thread on_signal([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (sig != 0) server.stop();
  });
  const std::string fenced = server.wait();
  if (fenced.empty()) {
    on_signal.join();
    spdlog::info("parameter server {} stopped", o.index);
    return 0;
  }
  // Fenced: stop serving at once; the signal thread is not waited for.
  server.stop();
  on_signal.detach();
  spdlog::error("parameter server {} left the job: {}", o.index, fenced);
  std::_Exit(kServerExcluded);
}

}  // namespace cohort::cli
