// `cohort run JOB.yaml`: the launcher. Starts the job's coordinator in this process, spawns one
// `cohort worker` process per worker, shows progress, and writes the run directory:
//   config.yaml      the resolved job file
//   metrics.jsonl    one progress record per logged step
//   events.jsonl     job lifecycle events (start, worker exits, failures, finish)
//   logs/rank-N.log  each worker's own log
//   logs/launcher.log this process's log (coordinator, stragglers, worker exits)
//   steps/rank-N.jsonl where each step of each rank went (trace/step_log.h), for `cohort diagnose`
//   checkpoints/     periodic checkpoints (written by rank 0)
//   summary.json     the outcome
//   hang-report.txt  when a collective timed out or no rank made progress for debug.hang_timeout_s:
//                    every rank's flight recorder and the diagnosis (trace/hang_report.h)
// Ctrl-C (SIGINT) or SIGTERM stops every worker and the job ends as "cancelled". A launcher that is
// killed leaves its local workers training for up to elastic.coordinator_wait_s, and `cohort run
// --resume RUN_DIR` re-adopts them (readopt.h); workers of a Python program, of a job with
// parameter servers, or started through Slurm or mpirun die with it (PR_SET_PDEATHSIG).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/log.h"
#include "cohort/cli/args.h"
#include "cohort/cli/commands.h"
#include "cohort/cli/job_files.h"
#include "cohort/cli/python_launch.h"
#include "cohort/cli/run_job.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/elastic/process.h"
#include "cohort/store/connect.h"
#include "cohort/store/etcd_store.h"
#include "cohort/train/config.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cohort::cli {
namespace {

// `cohort run ... --launcher slurm` outside an allocation: the same command as a batch job, in a
// run directory fixed now so that the user knows where to look.
int submit_to_slurm(int argc, char** argv, const RunSettings& settings,
                    const train::JobConfig& cfg) {
  std::vector<std::string> args = {elastic::self_executable()};
  bool has_run_dir = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    // The batch job runs in the allocation: not submitted again, nor given sbatch's options.
    if (a == "--launcher" || a == "--launcher-arg") {
      ++i;
      continue;
    }
    if (a.rfind("--launcher=", 0) == 0 || a.rfind("--launcher-arg=", 0) == 0) continue;
    has_run_dir |= a == "--run-dir" || a.rfind("--run-dir=", 0) == 0 || a == "--resume";
    args.push_back(a);
  }
  fs::path run_dir = fs::absolute(!settings.resume_dir.empty() ? fs::path(settings.resume_dir)
                                  : !settings.run_dir.empty()
                                      ? fs::path(settings.run_dir)
                                      : fs::path("runs") / (cfg.name + "-" + timestamp_for_dir()));
  if (!has_run_dir) args.insert(args.end(), {"--run-dir", run_dir.string()});
  fs::create_directories(run_dir);
  auto cmd = sbatch_command(cfg.name, cfg.workers, cfg.threads_per_worker,
                            (run_dir / "slurm-%j.out").string(), settings.launcher_args, args);
  elastic::ChildProcess sbatch =
      elastic::ChildProcess::spawn({.executable = cmd[0],
                                    .args = {cmd.begin() + 1, cmd.end()},
                                    .stdout_path = (run_dir / "sbatch.out").string(),
                                    .stderr_path = (run_dir / "sbatch.out").string()});
  std::optional<elastic::ExitStatus> st = sbatch.wait_for(std::chrono::seconds(60));
  if (!st) st = sbatch.terminate(std::chrono::seconds(1));
  const std::string said = read_file(run_dir / "sbatch.out");
  if (!st->ok()) throw Error("sbatch " + st->describe() + ": " + said);
  std::printf("cohort: submitted Slurm job %s; run directory %s\n",
              said.substr(0, said.find_first_of("\n;")).c_str(), run_dir.c_str());
  return 0;
}

// A standby started beside its job (a Kubernetes pod, --run-id) waits for the job to start before
// it campaigns: leading a job nobody has published would be leading nothing. etcd out of reach
// for a while (starting too) is ridden out.
// Whether the job started within `limit` seconds (negative: no limit).
bool wait_for_job(store::EtcdStore& job, const std::string& where, long limit) {
  const auto deadline = Clock::now() + std::chrono::seconds(std::max(limit, 0L));
  bool said = false;
  for (;;) {
    try {
      if (job.check({elastic::keys::kConfig})) return true;
      if (limit >= 0 && Clock::now() >= deadline) return false;
      if (!said) {
        std::printf("cohort: standby: waiting for the job at %s to start\n", where.c_str());
        std::fflush(stdout);
        said = true;
      }
      job.wait({elastic::keys::kConfig},
               limit >= 0 ? std::max(std::chrono::duration_cast<Millis>(deadline - Clock::now()),
                                     Millis(1))
                          : Millis(60000));
      return true;
    } catch (const TimeoutError&) {
    } catch (const Error& e) {
      spdlog::warn("standby: {} (trying again)", e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

int usage(std::ostream& os, int code) {
  os << "usage: cohort run JOB.yaml [--set key=value]... [--run-dir DIR]\n"
        "       cohort run --resume RUN_DIR [--set key=value]...\n"
        "       cohort run [--workers N] SCRIPT.py [args...]   (cohort run --help SCRIPT.py)\n"
        "       cohort run --standby etcd://HOST:PORT/PREFIX/RUN [--run-dir DIR]\n"
        "options: --bind HOST --port P        where the coordinator listens (127.0.0.1, any port)\n"
        "         --external-workers          start no workers: they are started elsewhere with\n"
        "                                     `cohort worker --join HOST:PORT` (mpirun, srun, "
        "...)\n"
        "         --token-file F              the job token: read from F, or written to F (mode\n"
        "                                     0600) if F does not exist\n"
        "         --launcher local|slurm|mpirun  what starts the workers: child processes here\n"
        "                                     (local), a job step each in this Slurm allocation\n"
        "                                     (slurm; outside one, the job is submitted with\n"
        "                                     sbatch), or one mpirun (mpirun); docs/clusters.md\n"
        "         --bind-to auto|none         auto: each local worker runs on its own share of\n"
        "                                     the CPUs when there are at most as many workers as\n"
        "                                     CPUs, as mpirun binds its ranks (default auto)\n"
        "         --launcher-arg ARG          an option for mpirun or sbatch (repeat it:\n"
        "                                     --launcher-arg --hostfile --launcher-arg hosts)\n"
        "         --resume RUN_DIR            go on with the job of RUN_DIR: re-adopt its workers\n"
        "                                     that still run, or else restart from its newest\n"
        "                                     checkpoint\n"
        "         --run-id ID                 with coordinator.store: the job's keys go under\n"
        "                                     PREFIX/ID (workers join etcd://.../PREFIX/ID)\n"
        "         --standby ADDRESS           a standby coordinator of the job whose store is at\n"
        "                                     ADDRESS (coordinator.store; what the workers join):\n"
        "                                     takes the job over when its coordinator is gone\n"
        "         --standby-wait S            how long a standby waits for its job to start, in\n"
        "                                     seconds (default: as long as it takes)\n\n"
        "Runs a training job: a coordinator in this process and one worker process per worker.\n"
        "Ctrl-C stops the job cleanly.\n";
  return code;
}

}  // namespace

int run_main(int argc, char** argv) {
  if (python_script_at(argc, argv) > 0) return run_python_main(argc, argv);
  Args args(argc, argv,
            {"set", "run-dir", "resume", "bind", "port", "token-file", "launcher", "launcher-arg",
             "standby", "standby-wait", "run-id", "bind-to"},
            {"help", "external-workers"});
  if (args.has("help")) return usage(std::cout, 0);
  RunSettings settings;
  settings.resume_dir = args.get_or("resume", "");
  settings.standby = args.get_or("standby", "");
  if (args.positionals().size() !=
      (settings.resume_dir.empty() && settings.standby.empty() ? 1u : 0u)) {
    return usage(std::cerr, 2);
  }
  settings.external = args.has("external-workers");
  settings.run_dir = args.get_or("run-dir", "");
  settings.launcher = parse_launcher(args.get_or("launcher", "local"));
  settings.launcher_args = args.all("launcher-arg");
  settings.bind_to_cpus = bind_to_cpus(args);
  // Workers on other nodes reach a coordinator that listens on every address.
  settings.bind =
      args.get_or("bind", settings.launcher == LauncherKind::Local ? "127.0.0.1" : "0.0.0.0");
  settings.port = static_cast<uint16_t>(args.get_int("port", 0));
  settings.token_file = args.get_or("token-file", "");
  settings.run_id = args.get_or("run-id", "");
  if (!settings.run_id.empty() &&
      (settings.run_id.size() > 100 ||
       settings.run_id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789._-") != std::string::npos)) {
    throw ConfigError("--run-id: '" + settings.run_id +
                      "' is not a run id (letters, digits, '.', '_' and '-', at most 100)");
  }

  if (!settings.standby.empty()) {
    // The job as its coordinator published it; the workers are its, started elsewhere.
    if (!store::is_etcd(settings.standby))
      throw ConfigError("--standby: " + settings.standby + " is not an etcd address");
    store::EtcdStore job(store::EtcdAddress::parse(settings.standby));
    if (!wait_for_job(job, settings.standby, args.get_int("standby-wait", -1))) {
      std::printf("cohort: standby: no job at %s: nothing to take over\n",
                  settings.standby.c_str());
      return 0;
    }
    settings.external = true;
    return run_job(
        train::parse_job_config(store::to_string(job.get(elastic::keys::kConfig)),
                                "job config from " + settings.standby, {.check_paths = false}),
        settings);
  }
  // Resolve the job: from the job file, or from the run directory being resumed.
  std::string job_path = settings.resume_dir.empty()
                             ? args.positionals()[0]
                             : (fs::path(settings.resume_dir) / "config.yaml").string();
  train::LoadOptions load_options;
  load_options.overrides = args.all("set");
  const bool submit = settings.launcher == LauncherKind::Slurm && !std::getenv("SLURM_JOB_ID");
  load_options.check_paths = !submit;  // the allocation's nodes check the data set
  const train::JobConfig cfg = train::load_job_config(job_path, load_options);
  if (submit) return submit_to_slurm(argc, argv, settings, cfg);
  return run_job(cfg, settings);
}

}  // namespace cohort::cli
