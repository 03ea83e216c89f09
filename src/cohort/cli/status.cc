// `cohort status [URL]`: the console's picture in the terminal — job state, progress and ETA,
// loss, throughput, one row per worker, the latest events — read from a running job's console
// (its JSON API). Without a URL it reads the newest runs/*/console.url.
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/cli/args.h"
#include "cohort/cli/job_files.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cohort::cli {
namespace {

struct ConsoleUrl {
  std::string origin;  // http://host:port
  std::string prefix;  // "" or /jobs/<id>
};

ConsoleUrl parse_url(std::string url) {
  while (!url.empty() && (url.back() == '/' || url.back() == '\n' || url.back() == ' ')) {
    url.pop_back();
  }
  if (url.find("://") == std::string::npos) url = "http://" + url;
  if (url.rfind("http://", 0) != 0)
    throw ConfigError(url + ": only http:// consoles are supported");
  auto path = url.find('/', 7);
  if (path == std::string::npos) return {url, ""};
  return {url.substr(0, path), url.substr(path)};
}

// The newest runs/*/console.url under the current directory.
std::string newest_console_url() {
  fs::path best;
  fs::file_time_type best_time{};
  std::error_code ec;
  for (const auto& d : fs::directory_iterator("runs", ec)) {
    fs::path f = d.path() / "console.url";
    if (!fs::exists(f, ec)) continue;
    auto t = fs::last_write_time(f, ec);
    if (best.empty() || t > best_time) {
      best = f;
      best_time = t;
    }
  }
  if (best.empty()) {
    throw ConfigError(
        "no URL given and no runs/*/console.url here: pass the console's URL (a job's console "
        "runs when its job file has a dashboard: section)");
  }
  return read_file(best);
}

json fetch(httplib::Client& c, const ConsoleUrl& u, const std::string& path) {
  auto res = c.Get((u.prefix + path).c_str());
  if (!res) {
    throw Error("cannot reach the console at " + u.origin + u.prefix +
                "/: " + httplib::to_string(res.error()) + " (has the job ended?)");
  }
  if (res->status != 200) {
    throw Error(u.origin + u.prefix + path + ": HTTP " + std::to_string(res->status) + ": " +
                res->body);
  }
  return json::parse(res->body);
}

std::string duration(const json& v) {
  if (!v.is_number()) return "--:--";
  return format_duration(v.get<double>());
}

std::string bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int i = 0;
  while (b >= 1000 && i < 4) {
    b /= 1000;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), i ? "%.1f %s" : "%.0f %s", b, units[i]);
  return buf;
}

std::string number(const json& j, const char* key, const char* format, double scale = 1) {
  if (!j.contains(key) || !j[key].is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, j[key].get<double>() * scale);
  return buf;
}

std::string clock_time(double t) {
  std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&s, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return buf;
}

void print_picture(const json& job, const json& workers, const json& events) {
  const long step = job.value("step", 0L), total = job.value("total_steps", 0L);
  std::printf("job %s  %s  step %ld/%ld", job.value("name", std::string("?")).c_str(),
              job.value("state", std::string("?")).c_str(), step, total);
  if (job.contains("epochs")) {
    std::printf("  epoch %ld/%ld", job.value("epoch", 0L) + 1, job.value("epochs", 1L));
  }
  std::printf("\n");
  const int width = 40;
  int filled = static_cast<int>(width * std::clamp(job.value("progress", 0.0), 0.0, 1.0));
  std::printf("[%s%s] %3.0f%%  elapsed %s  ETA %s\n", std::string(filled, '#').c_str(),
              std::string(width - filled, '.').c_str(), 100 * job.value("progress", 0.0),
              duration(job["elapsed_seconds"]).c_str(), duration(job["eta_seconds"]).c_str());
  std::printf("loss %s  accuracy %s  %s samples/s  workers %d/%d joined",
              number(job, "loss", "%.4f").c_str(), number(job, "accuracy", "%.4f").c_str(),
              number(job, "samples_per_sec", "%.0f").c_str(), job.value("joined", 0),
              job.value("world_size", 0));
  const int members = job.value("members", job.value("world_size", 0));
  if (members != job.value("world_size", 0)) std::printf(", %d training", members);
  std::printf("\n");
  if (job.contains("summary") && job["summary"].is_object()) {
    const json& s = job["summary"];
    if (s.contains("error")) {
      std::printf("error: %s\n", s.value("error", std::string()).c_str());
    } else {
      std::printf("test accuracy %s  %s samples/s\n", number(s, "test_accuracy", "%.4f").c_str(),
                  number(s, "samples_per_sec", "%.0f").c_str());
    }
  }
  std::printf("\n%-9s %-16s %-8s %-11s %-8s %-10s %-6s %-10s %s\n", "rank", "host", "pid", "state",
              "step", "step time", "comm", "sent", "heartbeat");
  for (const auto& w : workers) {
    std::string hb = w["last_heartbeat"].is_number()
                         ? number(w, "heartbeat_age_seconds", "%.1f s ago")
                         : std::string("-");
    // A replacement worker: "3 (for 1)".
    std::string rank = std::to_string(w.value("rank", 0));
    if (w.contains("replaces")) rank += " (for " + std::to_string(w.value("replaces", 0)) + ")";
    std::printf("%-9s %-16s %-8ld %-11s %-8s %-10s %-6s %-10s %s\n", rank.c_str(),
                w.value("host", std::string("-")).substr(0, 16).c_str(), w.value("pid", 0L),
                w.value("state", std::string("?")).c_str(), number(w, "step", "%.0f").c_str(),
                number(w, "step_time", "%.1f ms", 1000).c_str(),
                number(w, "comm_share", "%.0f%%", 100).c_str(),
                w.contains("bytes_sent") ? bytes(w.value("bytes_sent", 0.0)).c_str() : "-",
                hb.c_str());
  }
  if (!events.empty()) {
    std::printf("\nlatest events\n");
    size_t from = events.size() > 8 ? events.size() - 8 : 0;
    for (size_t i = from; i < events.size(); ++i) {
      const json& e = events[i];
      std::string details;
      for (const auto& [k, v] : e.items()) {
        if (k == "time" || k == "event" || (v.is_string() && v.get<std::string>().empty()))
          continue;
        details += "  " + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
      }
      std::printf("  %s %s%s\n", clock_time(e.value("time", 0.0)).c_str(),
                  e.value("event", std::string("?")).c_str(), details.c_str());
    }
  }
}

int usage(std::ostream& os, int code) {
  os << "usage: cohort status [URL] [--watch] [--interval SECONDS] [--json]\n\n"
        "Shows a running job's console in the terminal: state, progress and ETA, loss, samples/s,\n"
        "workers and the latest events. URL is the console's address (printed by `cohort run`,\n"
        "and kept in RUN_DIR/console.url); without it, the newest runs/*/console.url.\n"
        "  --watch       redraw until the job ends\n"
        "  --json        print the job, workers and events as one JSON object\n";
  return code;
}

}  // namespace

int status_main(int argc, char** argv) {
  Args args(argc, argv, {"interval"}, {"help", "watch", "json"});
  if (args.has("help")) return usage(std::cout, 0);
  if (args.positionals().size() > 1) return usage(std::cerr, 2);
  ConsoleUrl url =
      parse_url(args.positionals().empty() ? newest_console_url() : args.positionals()[0]);
  const long interval = args.get_int("interval", 1);
  if (interval < 1) throw ConfigError("--interval: expected a positive number of seconds");
  httplib::Client client(url.origin);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  const bool watch = args.has("watch"), tty = ::isatty(STDOUT_FILENO);
  for (bool seen = false;; seen = true) {
    json job, workers, events;
    try {
      job = fetch(client, url, "/api/job");
      workers = fetch(client, url, "/api/workers");
      events = fetch(client, url, "/api/events");
    } catch (const Error& e) {
      if (!seen) throw;
      // The console lives as long as its job: watching ends with it.
      std::printf("\nthe console has closed: the job has ended (see its run directory)\n");
      return 0;
    }
    if (args.has("json")) {
      std::printf("%s\n",
                  json{{"job", job}, {"workers", workers}, {"events", events}}.dump(2).c_str());
    } else {
      if (watch && tty) std::printf("\033[H\033[2J");
      print_picture(job, workers, events);
    }
    std::fflush(stdout);
    const std::string state = job.value("state", std::string());
    if (!watch || state == "completed" || state == "failed" || state == "cancelled") break;
    std::this_thread::sleep_for(std::chrono::seconds(interval));
    if (!tty) std::printf("\n");
  }
  return 0;
}

}  // namespace cohort::cli
