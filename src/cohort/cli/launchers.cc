#include "cohort/cli/launchers.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/log.h"

namespace cohort::cli {
namespace {

// The path of `name` on PATH; ConfigError naming what is missing.
std::string find_program(const std::string& name, const std::string& why) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw ConfigError(name + " is not on PATH (" + why + ")");
}

// Runs argv (no shell) and returns what it wrote to stdout; Error naming the command when it
// fails.
std::string output_of(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw SystemError("pipe", errno);
  const pid_t pid = ::fork();
  if (pid < 0) throw SystemError("fork", errno);
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    throw Error("`" + cmd + "` failed (" +
                (WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                   : "signal " + std::to_string(WTERMSIG(status))) +
                ")");
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// The value of `key=` in `scontrol show node` or `scontrol show job -o` output.
std::string field(const std::string& text, const std::string& key) {
  std::stringstream in(text);
  for (std::string word; in >> word;) {
    if (word.rfind(key + "=", 0) == 0) return word.substr(key.size() + 1);
  }
  return "";
}

// BLAS and OpenMP pools are sized when the libraries load, before main(): the worker's thread
// budget has to be in its environment from the start, or every worker starts a pool as wide as
// the machine and the workers fight over the cores.
std::map<std::string, std::string> worker_env(const WorkerCommand& w) {
  return {{"COHORT_TOKEN", w.token},
          {"OMP_NUM_THREADS", std::to_string(w.threads)},
          {"OPENBLAS_NUM_THREADS", std::to_string(w.threads)}};
}

}  // namespace

LauncherKind parse_launcher(std::string_view s) {
  if (s == "local") return LauncherKind::Local;
  if (s == "slurm") return LauncherKind::Slurm;
  if (s == "mpirun") return LauncherKind::Mpirun;
  throw ConfigError("--launcher: unknown launcher '" + std::string(s) +
                    "' (expected local, slurm or mpirun)");
}

SlurmAllocation SlurmAllocation::current() {
  const char* id = std::getenv("SLURM_JOB_ID");
  const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
  if (!id || !nodelist) {
    throw ConfigError(
        "--launcher slurm: not inside a Slurm allocation (SLURM_JOB_ID and SLURM_JOB_NODELIST "
        "are not set); run it in an sbatch script or under salloc");
  }
  SlurmAllocation a;
  a.job_id = id;
  const std::string scontrol = find_program("scontrol", "--launcher slurm needs Slurm's tools");
  a.nodes = lines_of(output_of({scontrol, "show", "hostnames", nodelist}));
  if (a.nodes.empty()) throw ConfigError("--launcher slurm: SLURM_JOB_NODELIST names no node");
  for (const auto& node : a.nodes) {
    std::string addr = field(output_of({scontrol, "show", "node", node}), "NodeAddr");
    a.addresses.push_back(addr.empty() ? node : addr);
  }
  return a;
}

std::string SlurmAllocation::this_node_address() const {
  const char* here = std::getenv("SLURMD_NODENAME");
  for (size_t i = 0; here && i < nodes.size(); ++i) {
    if (nodes[i] == here) return addresses[i];
  }
  return addresses.front();
}

elastic::SpawnOptions local_worker(const WorkerCommand& w, int rank) {
  return {.executable = w.executable,
          .args = {"worker", "--join", w.join, "--rank", std::to_string(rank)},
          .env = worker_env(w),
          .stdout_path = w.log,
          .stderr_path = w.log};
}

ProcessStarter::ProcessStarter(const WorkerCommand& w, bool fork_server) : self_(w.executable) {
  if (!fork_server) return;
  try {
    spawner_ = elastic::Spawner::start(self_, worker_env(w));
  } catch (const std::exception& e) {
    spdlog::warn("starting each worker with its own exec: {}", e.what());
  }
}

std::string SlurmAllocation::ending() const {
  // The query can itself die of the ending it asks about: Slurm signals every process of the
  // batch step, a scontrol this launcher started included, moments after the workers' steps.
  // Signals go once (until KillWait's SIGKILL), so asking again gets the answer.
  constexpr int kAttempts = 4;
  for (int attempt = 1;; ++attempt) {
    try {
      const std::string job = output_of(
          {find_program("scontrol", "--launcher slurm needs Slurm's tools"), "show", "job", "-o",
           job_id});
      const std::string state = field(job, "JobState");
      if (state.empty() || state == "RUNNING") return "";
      return "JobState=" + state + " Reason=" + field(job, "Reason");
    } catch (const std::exception& e) {
      if (attempt == kAttempts || dynamic_cast<const ConfigError*>(&e)) {
        spdlog::warn("could not ask Slurm about job {} ({} attempts): {}", job_id, attempt,
                     e.what());
        return "";
      }
      spdlog::info("asking Slurm about job {} again: {}", job_id, e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(100 << attempt));
    }
  }
}

elastic::ChildProcess ProcessStarter::start(const elastic::SpawnOptions& how) {
  if (spawner_ && how.executable == self_) {
    try {
      return spawner_->spawn(how);
    } catch (const std::exception& e) {
      spdlog::warn("starting workers with their own exec from now on: {}", e.what());
      spawner_.reset();
    }
  }
  return elastic::ChildProcess::spawn(how);
}

elastic::SpawnOptions slurm_worker(const SlurmAllocation& a, const WorkerCommand& w, int rank) {
  const size_t node = static_cast<size_t>(rank) % a.nodes.size();
  return {.executable = find_program("srun", "--launcher slurm starts workers with srun"),
          .args = {"--jobid=" + a.job_id, "--nodes=1", "--ntasks=1",
                   "--cpus-per-task=" + std::to_string(w.threads), "--exact", "--overlap",
                   "--kill-on-bad-exit=0", "--nodelist=" + a.nodes[node],
                   "--job-name=cohort-rank-" + std::to_string(rank), w.executable, "worker",
                   "--join", w.join, "--rank", std::to_string(rank), "--bind", a.addresses[node]},
          .env = worker_env(w),
          .stdout_path = w.log,
          .stderr_path = w.log};
}

elastic::SpawnOptions mpirun_workers(const WorkerCommand& w, long workers,
                                     const std::vector<std::string>& mpirun_args) {
  elastic::SpawnOptions o{
      .executable =
          find_program("mpirun", "--launcher mpirun starts workers with Open MPI's mpirun"),
      .args = {"-np", std::to_string(workers),
               // One rank's death must not take the others with it (Open MPI's default).
               "--mca", "orte_abort_on_non_zero_status", "0",
               // The job token and thread budget reach every rank, whatever its node.
               "-x", "COHORT_TOKEN", "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS"},
      .env = worker_env(w),
      .stdout_path = w.log,
      .stderr_path = w.log};
  if (::geteuid() == 0) o.args.push_back("--allow-run-as-root");
  o.args.insert(o.args.end(), mpirun_args.begin(), mpirun_args.end());
  o.args.insert(o.args.end(), {w.executable, "worker", "--join", w.join});
  return o;
}

std::vector<std::string> sbatch_command(const std::string& name, long workers, long threads,
                                        const std::string& output,
                                        const std::vector<std::string>& sbatch_args,
                                        const std::vector<std::string>& cohort_run_args) {
  std::vector<std::string> cmd = {
      find_program("sbatch", "--launcher slurm outside an allocation submits one with sbatch"),
      "--parsable", "--job-name=" + name, "--ntasks=" + std::to_string(workers),
      "--cpus-per-task=" + std::to_string(threads), "--output=" + output,
      // SIGTERM to the launcher a minute before the time limit (and scancel's): it ends the job
      // and says so, and Slurm kills what is left after KillWait.
      "--signal=B:TERM@60"};
  cmd.insert(cmd.end(), sbatch_args.begin(), sbatch_args.end());
  std::string wrap;
  for (const auto& a : cohort_run_args) {
    // Single-quoted for the batch shell; a quote inside becomes '\''.
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    wrap += (wrap.empty() ? "" : " ") + q + "'";
  }
  cmd.push_back("--wrap=exec " + wrap + " --launcher slurm");
  return cmd;
}

}  // namespace cohort::cli
