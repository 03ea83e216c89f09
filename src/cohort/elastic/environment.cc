#include "cohort/elastic/environment.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <optional>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/log.h"

namespace cohort::elastic {

namespace {

struct Variable {
  std::string name;
  std::string value;
  std::string describe() const { return name + "='" + value + "'"; }
};

class Reader {
 public:
  explicit Reader(const EnvOptions& options) : options_(options) {}

  std::optional<Variable> get(const std::string& name) const {
    if (auto it = options_.variables.find(name); it != options_.variables.end()) {
      return Variable{name, it->second};
    }
    if (options_.read_process_environment) {
      if (const char* v = std::getenv(name.c_str())) return Variable{name, v};
    }
    return std::nullopt;
  }

  // The first of `names` that is set (the launchers' conventions, in order of preference).
  Variable first_of(const std::vector<std::string>& names, const std::string& meaning) const {
    for (const auto& n : names) {
      if (auto v = get(n)) return *v;
    }
    std::string alternatives;
    for (size_t i = 1; i < names.size(); ++i) alternatives += (i > 1 ? ", " : "") + names[i];
    throw ConfigError(names[0] + " is not set (" + meaning + "; neither is " + alternatives + ")");
  }

  Variable required(const std::string& name, const std::string& meaning) const {
    auto v = get(name);
    if (!v || v->value.empty()) throw ConfigError(name + " is not set (" + meaning + ")");
    return *v;
  }

 private:
  const EnvOptions& options_;
};

int parse_int(const Variable& v) {
  const std::string& s = v.value;
  // Digits only: strtol alone would accept " 3", "+3" and "3abc".
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
    throw ConfigError(v.describe() + " is not a non-negative integer");
  }
  return std::stoi(s);
}

double parse_seconds(const Variable& v) {
  const char* begin = v.value.c_str();
  char* end = nullptr;
  errno = 0;
  double s = std::strtod(begin, &end);
  if (v.value.empty() || end != begin + v.value.size() || errno != 0 || !std::isfinite(s) ||
      s <= 0) {
    throw ConfigError(v.describe() + " is not a positive number of seconds");
  }
  return s;
}

}  // namespace

EnvConfig read_environment(const EnvOptions& options) {
  Reader env(options);
  EnvConfig c;

  Variable world = env.first_of(
      {"COHORT_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, "number of ranks");
  c.world_size = parse_int(world);
  if (c.world_size < 1) throw ConfigError(world.describe() + ": a job needs at least one rank");

  Variable rank = env.first_of({"COHORT_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"},
                               "this process's rank");
  c.rank = parse_int(rank);
  if (c.rank >= c.world_size) {
    throw ConfigError(rank.describe() + " is out of range for " + world.describe() +
                      " (ranks are 0 to " + std::to_string(c.world_size - 1) + ")");
  }

  Variable master = env.required("COHORT_MASTER_ADDR", "HOST:PORT of the rendezvous store");
  try {
    c.master = net::Endpoint::parse(master.value);
  } catch (const ConfigError& e) {
    throw ConfigError("COHORT_MASTER_ADDR: " + std::string(e.what()));
  }
  if (c.master.port == 0) throw ConfigError(master.describe() + " needs a port other than 0");

  c.token = env.required("COHORT_TOKEN", "the job's secret, the same on every rank").value;

  if (auto t = env.get("COHORT_TIMEOUT_S")) {
    c.timeout = std::chrono::milliseconds(std::llround(parse_seconds(*t) * 1000));
  }
  if (auto b = env.get("COHORT_BIND_HOST"); b && !b->value.empty()) c.bind_host = b->value;
  if (auto a = env.get("COHORT_ADVERTISE_HOST"); a && !a->value.empty()) {
    c.advertise_host = a->value;
  }
  return c;
}

ProcessGroup init_from_environment(const EnvOptions& options) {
  EnvConfig c = read_environment(options);
  ProcessGroup g;
  g.prefix_ = options.store_prefix;
  g.timeout_ = c.timeout;
  if (c.rank == 0) {
    try {
      g.server = std::make_unique<store::StoreServer>(store::StoreServerOptions{
          .bind_host = c.master.host, .port = c.master.port, .token = c.token});
    } catch (const std::exception& e) {
      throw ConfigError("rank 0 could not serve the rendezvous store at COHORT_MASTER_ADDR='" +
                        c.master.str() + "': " + e.what());
    }
  }
  // TcpStore retries refused connections until the timeout: rank 0 may start last.
  g.store = std::make_unique<store::TcpStore>(c.master, c.token, c.timeout);
  g.store->set_timeout(c.timeout);
  g.comm = comm::Communicator::create(*g.store, {.rank = c.rank,
                                                 .size = c.world_size,
                                                 .token = c.token,
                                                 .bind_host = c.bind_host,
                                                 .advertise_host = c.advertise_host,
                                                 .timeout = c.timeout,
                                                 .store_prefix = options.store_prefix});
  return g;
}

std::string ProcessGroup::done_key(int r) const {
  return prefix_ + "/done/" + std::to_string(r);
}

void ProcessGroup::finish() {
  if (finished_ || !comm || !store) return;
  finished_ = true;
  const int r = comm->rank(), n = comm->size();
  if (r != 0) {
    store->set(done_key(r), store::to_bytes("1"));
    return;
  }
  std::vector<std::string> keys;
  for (int i = 1; i < n; ++i) keys.push_back(done_key(i));
  store->wait(keys, timeout_);  // TimeoutError lists the keys, hence the ranks, still missing
}

ProcessGroup::~ProcessGroup() {
  // Unwinding from a failure on rank 0: the job is over, waiting for the others would only add the
  // timeout to the time it takes to report the error.
  if (std::uncaught_exceptions() > 0) return;
  try {
    finish();
  } catch (const std::exception& e) {
    // A rank that failed never marks itself done; the server stops anyway.
    spdlog::warn("process group: {}", e.what());
  }
}

}  // namespace cohort::elastic
