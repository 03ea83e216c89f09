#include "cohort/cli/readopt.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/host.h"
#include "cohort/base/process_state.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cohort::cli {

fs::path journal_path(const fs::path& run_dir) {
  return run_dir / "store.journal";
}
fs::path record_path(const fs::path& run_dir) {
  return run_dir / "coordinator.json";
}

std::optional<CoordinatorRecord> CoordinatorRecord::read(const fs::path& run_dir) {
  const fs::path path = record_path(run_dir);
  if (!fs::exists(path)) return std::nullopt;
  try {
    const json j = json::parse(read_file(path));
    return CoordinatorRecord{.host = j.at("host").get<std::string>(),
                             .pid = j.at("pid").get<long>(),
                             .bind = j.at("bind").get<std::string>(),
                             .port = j.at("port").get<uint16_t>(),
                             .token_file = j.at("token_file").get<std::string>()};
  } catch (const json::exception& e) {
    throw Error(path.string() + " is not a coordinator's record: " + e.what());
  }
}

void CoordinatorRecord::write(const fs::path& run_dir) const {
  write_file_atomically(
      record_path(run_dir),
      json{{"host", host}, {"pid", pid}, {"bind", bind}, {"port", port}, {"token_file", token_file}}
              .dump(2) +
          "\n");
}

std::string CoordinatorRecord::describe() const {
  return "host " + host + " pid " + std::to_string(pid);
}

namespace {

// Whether process `pid` of this machine is there and not a zombie.
bool alive(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  const char state = process_state(pid);
  return state != '\0' && state != 'Z';
}

}  // namespace

std::optional<CoordinatorRecord> orphaned_job(const fs::path& run_dir) {
  std::optional<CoordinatorRecord> r = CoordinatorRecord::read(run_dir);
  if (!r || !fs::exists(journal_path(run_dir))) return std::nullopt;
  if (r->host == host_name() && alive(r->pid)) {
    std::ifstream cmd("/proc/" + std::to_string(r->pid) + "/cmdline");
    std::string text((std::istreambuf_iterator<char>(cmd)), {});
    if (text.find("cohort") != std::string::npos)
      throw Error("the job in " + run_dir.string() + " still has its coordinator (pid " +
                  std::to_string(r->pid) + ", listening on port " + std::to_string(r->port) +
                  "): stop it first, or let it run");
  }
  return r;
}

bool workers_still_run(elastic::Coordinator& coordinator, Millis timeout) {
  const std::map<int, pid_t> here = coordinator.members_on_this_host();
  if (here.size() == coordinator.members().size()) {
    bool any = false;
    for (const auto& [rank, pid] : here) any |= alive(pid);
    if (!any) return false;
  }
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (coordinator.heard_from_members()) return true;
    // Heartbeats come every elastic.heartbeat_s; this only looks at the counters.
    std::this_thread::sleep_for(Millis(50));
  }
  return coordinator.heard_from_members();
}

}  // namespace cohort::cli
