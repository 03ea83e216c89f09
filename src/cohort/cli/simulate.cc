// `cohort simulate JOB.yaml --workers 2,8,64,512,4096 [--profile P] [--hosts H | --ranks-per-host L]
// [--one-machine] [--link 25gbit] [--link-latency 5us] [--json] [--html report.html]`: the step
// time, the communication left exposed after backward, bytes per host link, samples/s and scaling
// efficiency the simulator (sim/step.h) predicts for the job at each world size, for the job's own
// configuration and the choices that matter, and the fastest of them.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cohort/base/error.h"
#include "cohort/cli/args.h"
#include "cohort/cli/sim_job.h"
#include "cohort/cli/simulate_report.h"
#include "cohort/sim/sweep.h"

using nlohmann::json;

namespace cohort::cli {
namespace {

int usage(std::ostream& os, int code) {
  os << "usage: cohort simulate JOB.yaml --workers N[,N...] [--profile P] [--hosts H | "
        "--ranks-per-host L]\n"
        "       [--one-machine] [--link BW] [--link-latency T] [--link-mtu B] [--link-framing B]\n"
        "       [--only-job] [--json] [--html FILE]\n"
        "       [--set key=value]...\n\n"
        "Predicts, for each number of workers, the step time, the communication left exposed "
        "after\n"
        "backward, the bytes on the busiest host link, samples/s and scaling efficiency of the "
        "job,\n"
        "and of the choices that matter (allreduce algorithm, bucket size, gradient codec, local\n"
        "SGD), and names the fastest by step time. The profile (cohort calibrate) holds the\n"
        "machine's and the job's measured costs; ./profile.json when --profile is not given.\n\n"
        "  --hosts H            spread the workers evenly over H hosts (H divides every N; "
        "default: the\n"
        "                       profile's ranks per host)\n"
        "  --ranks-per-host L   L workers per host\n"
        "  --one-machine        the hosts are namespaces of one machine and share its cores\n"
        "                       (the emulated cluster of scripts/netcluster.sh)\n"
        "  --link BW            each host's network link instead of the profile's: a line rate in\n"
        "                       bits (25gbit, 100mbit), or what one TCP stream carries (1.2gbyte)\n"
        "  --link-latency T     the latency between hosts (5us, 0.1ms, ...) instead of the "
        "profile's\n"
        "  --link-mtu BYTES     the line's MTU (default 1500): TCP carries mtu - 52 bytes of each\n"
        "                       packet's mtu + framing on the line\n"
        "  --link-framing BYTES what the line counts beyond each packet (default 38: Ethernet's\n"
        "                       header, FCS, preamble and gap; 14 for a tc qdisc's rate)\n"
        "  --only-job           the job's own configuration only\n"
        "  --json               print the predictions as JSON\n"
        "  --html FILE          write a report with charts to FILE\n\n"
        "A shorter step is not always a sooner result: compression and local SGD change how many\n"
        "steps training needs, which the simulator does not model.\n";
  return code;
}

std::vector<int> parse_workers(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > (1 << 20)) {
      throw ConfigError("--workers " + text + ": expected a list of worker counts such as 2,8,64");
    }
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) throw ConfigError("--workers: expected a list of worker counts such as 2,8,64");
  return out;
}

json choice_json(const sim::Choice& c) {
  return {{"algorithm", comm::algorithm_name(c.algorithm)},
          {"bucket_mb", c.bucket_mb},
          {"codec", compress::method_name(c.compression.method)},
          {"sync", c.sync == sim::SyncMode::LocalSgd ? "local_sgd" : "allreduce"},
          {"period", c.period},
          {"description", sim::describe(c)}};
}

json prediction_json(const sim::Prediction& p) {
  return {{"step_s", p.step_s},
          {"compute_s", p.compute_s},
          {"exposed_comm_s", p.exposed_comm_s},
          {"link_bytes", p.link_bytes},
          {"rank_bytes", p.rank_bytes},
          {"samples_per_s", p.samples_per_s},
          {"efficiency", p.efficiency},
          {"closed_form_step_s", p.closed_form_step_s},
          {"buckets", p.buckets},
          {"algorithms", p.algorithms}};
}

void print_row(std::ostream& os, const std::string& label, const sim::SweepRow& r) {
  const sim::Prediction& p = r.prediction;
  char line[256];
  std::snprintf(line, sizeof line, "  %-8s %-44s %9.2f %9.2f %9.2f %9.2f %10.0f %6.2f %9.2f\n",
                label.c_str(), sim::describe(r.choice).c_str(), p.step_s * 1e3, p.compute_s * 1e3,
                p.exposed_comm_s * 1e3, p.link_bytes / 1e6, p.samples_per_s, p.efficiency,
                p.closed_form_step_s * 1e3);
  os << line;
}

}  // namespace

int simulate_main(int argc, char** argv) {
  Args args(argc, argv,
            {"workers", "profile", "hosts", "ranks-per-host", "link", "link-latency", "link-mtu",
             "link-framing", "html", "set"},
            {"help", "json", "one-machine", "only-job"});
  if (args.has("help")) return usage(std::cout, 0);
  if (args.positionals().size() != 1 || !args.has("workers")) return usage(std::cerr, 2);
  if (args.has("hosts") && args.has("ranks-per-host")) {
    throw ConfigError("--hosts and --ranks-per-host say the same thing: give one");
  }
  const std::string job_path = args.positionals()[0];
  const train::JobConfig job =
      train::load_job_config(job_path, {.overrides = args.all("set"), .check_paths = false});
  const std::optional<sim::Profile> found = find_profile(args.get("profile"));
  if (!found) {
    throw ConfigError("no profile: run `cohort calibrate " + job_path +
                      "` first (it writes profile.json), or give --profile");
  }
  const sim::Profile& profile = *found;
  if (!profile.has_compute) {
    throw ConfigError(profile.name + ": the profile has the machine only; run `cohort calibrate " +
                      job_path + "` for the job's compute");
  }
  const std::vector<int> worlds = parse_workers(*args.get("workers"));
  sim::Layout base;
  base.one_machine = args.has("one-machine");
  // A rate in bits is a line rate, of frames; one in bytes is what a stream carries, as the
  // profile's figures are.
  const bool has_link = args.has("link");
  const Bandwidth link = has_link ? parse_bandwidth("link", *args.get("link")) : Bandwidth{};
  const bool line_rate = has_link && link.in_bits;
  if ((args.has("link-mtu") || args.has("link-framing")) && !line_rate) {
    throw ConfigError(
        "--link-mtu and --link-framing describe a line rate: give --link in bits (25gbit)");
  }
  const long mtu = args.get_int("link-mtu", 1500), framing = args.get_int("link-framing", 38);
  if (mtu < 576 || mtu > 65536) throw ConfigError("--link-mtu: expected 576 to 65536 bytes");
  if (framing < 0 || framing > 1024) throw ConfigError("--link-framing: expected 0 to 1024 bytes");
  if (has_link) {
    base.link_bytes_per_s = line_rate
                                ? sim::tcp_payload_rate(link.bytes_per_s, static_cast<int>(mtu),
                                                        static_cast<int>(framing))
                                : link.bytes_per_s;
  }
  if (auto v = args.get("link-latency")) base.link_latency_s = parse_duration("link-latency", *v);
  const long hosts = args.get_int("hosts", 0);
  const long per_host = args.get_int("ranks-per-host", profile.ranks_per_host);
  if (args.has("hosts") && hosts < 1) throw ConfigError("--hosts: expected a positive integer");
  if (per_host < 1) throw ConfigError("--ranks-per-host: expected a positive integer");

  const sim::Choice choice = choice_of(job);
  const sim::SweepOptions options{.only_job = args.has("only-job")};
  std::vector<sim::SweepWorld> results;
  for (int n : worlds) {
    if (hosts > 0 && n % hosts != 0) {
      // ceil(n / H) ranks on each host would make fewer hosts than asked for.
      throw ConfigError("--hosts " + std::to_string(hosts) + " does not divide " +
                        std::to_string(n) +
                        " workers: the simulator places as many ranks on every host");
    }
    sim::Layout l = base;
    l.workers = n;
    l.ranks_per_host = hosts > 0 ? static_cast<int>((n + hosts - 1) / hosts)
                                 : static_cast<int>(std::min<long>(per_host, n));
    results.push_back(sim::sweep(profile, l, choice, options));
  }

  json out = {{"job", job.name}, {"profile", profile.name}, {"profile_sources", profile.sources},
              {"note", "A shorter step is not always a sooner result: compression and local SGD "
                       "change how many steps training needs, which the simulator does not model."},
              {"worlds", json::array()}};
  for (const sim::SweepWorld& w : results) {
    json rows = json::array();
    for (const sim::SweepRow& r : w.rows) {
      rows.push_back({{"varied", r.varied}, {"choice", choice_json(r.choice)},
                      {"prediction", prediction_json(r.prediction)}});
    }
    out["worlds"].push_back({{"workers", w.layout.workers},
                             {"hosts", w.layout.hosts()},
                             {"ranks_per_host", std::min(w.layout.ranks_per_host, w.layout.workers)},
                             {"rows", rows},
                             {"best", w.best}});
  }
  if (auto html = args.get("html")) write_simulate_report(*html, out);
  if (args.has("json")) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "cohort simulate: " << job.name << " with profile " << profile.name << "\n";
  std::cout << "                                                               step   compute   exposed"
               "   link MB  samples/s   eff.  closed-form\n"
               "                                                                 ms        ms        ms"
               "  per step                        ms\n";
  for (const sim::SweepWorld& w : results) {
    std::cout << w.layout.workers << " workers on " << w.layout.hosts() << " host"
              << (w.layout.hosts() == 1 ? "" : "s") << "\n";
    print_row(std::cout, "job", w.rows[0]);
    if (w.best != 0) print_row(std::cout, "fastest", w.rows[w.best]);
    if (w.rows.size() > 1) {
      const double gain = w.rows[0].prediction.step_s / w.rows[w.best].prediction.step_s;
      std::cout << "           " << w.rows.size() << " configurations simulated; fastest: "
                << (w.best == 0 ? "the job's own" : sim::describe(w.rows[w.best].choice));
      if (w.best != 0) {
        char g[32];
        std::snprintf(g, sizeof g, " (%.2fx shorter steps)", gain);
        std::cout << g;
      }
      std::cout << "\n";
    }
  }
  std::cout << "\nA shorter step is not always a sooner result: compression and local SGD change how\n"
               "many steps training needs, which the simulator does not model.\n";
  if (auto html = args.get("html")) std::cout << "report: " << *html << "\n";
  return 0;
}

}  // namespace cohort::cli
