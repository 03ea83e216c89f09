// The clients of `cohort serve`: `cohort submit JOB.yaml`, `cohort jobs`, `cohort cancel JOB` and
// `cohort logs JOB`; `cohort logs RUN_DIR [--rank R]` (an existing directory with logs/) merges a
// run directory's logs instead (trace/log_merge.h). The server is --server URL, else
// $COHORT_SERVER, else the one whose URL `cohort serve` left in its home ($COHORT_HOME or
// ~/.cohort)/serve.url, else 127.0.0.1:8090. The server's token is read from --token-file, else
// from serve.token in that home (a file only its owner may read, base/secret.h).
#include <httplib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/secret.h"
#include "cohort/cli/args.h"
#include "cohort/trace/log_merge.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cohort::cli {
namespace {

fs::path serve_home() {
  if (const char* h = std::getenv("COHORT_HOME"); h && *h) return h;
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cohort";
  return ".cohort";
}

// A server named by --server or $COHORT_SERVER is another machine's, or another user's: it gets
// no token but the one --token-file names.
bool server_named(const Args& args) {
  const char* env = std::getenv("COHORT_SERVER");
  return args.has("server") || (env && *env);
}

std::string server_url(const Args& args) {
  if (auto s = args.get("server")) return *s;
  if (const char* s = std::getenv("COHORT_SERVER"); s && *s) return s;
  if (fs::exists(serve_home() / "serve.url")) return read_file(serve_home() / "serve.url");
  return "http://127.0.0.1:8090";
}

// The server's token: --token-file, else - for the server of this home only - the one
// `cohort serve` left there; none otherwise (the server then refuses what needs it, and says so).
std::string server_token(const Args& args) {
  if (auto f = args.get("token-file")) return read_secret_file(*f, "--token-file");
  const fs::path mine = serve_home() / "serve.token";
  if (server_named(args) || !fs::exists(mine)) return "";
  return read_secret_file(mine, "token file");
}

class ServerClient {
 public:
  explicit ServerClient(const Args& args) : ServerClient(server_url(args), server_token(args)) {}
  ServerClient(std::string url, const std::string& token) : url_(std::move(url)) {
    while (!url_.empty() && (url_.back() == '\n' || url_.back() == '/' || url_.back() == ' ')) {
      url_.pop_back();
    }
    if (url_.find("://") == std::string::npos) url_ = "http://" + url_;
    client_ = std::make_unique<httplib::Client>(url_);
    client_->set_connection_timeout(5, 0);
    client_->set_read_timeout(60, 0);
    if (!token.empty()) client_->set_bearer_token_auth(token.c_str());
  }
  // Returns (status, body); throws Error if the server cannot be reached.
  std::pair<int, std::string> get(const std::string& path) { return check(client_->Get(path)); }
  std::pair<int, std::string> post(const std::string& path, const std::string& body) {
    return check(client_->Post(path, body, "application/json"));
  }
  const std::string& url() const { return url_; }

 private:
  std::pair<int, std::string> check(const httplib::Result& res) {
    if (!res) {
      throw Error("cannot reach cohort serve at " + url_ + ": " + httplib::to_string(res.error()) +
                  " (start it with `cohort serve`, or pass --server URL)");
    }
    return {res->status, res->body};
  }
  std::string url_;
  std::unique_ptr<httplib::Client> client_;
};

// The server's {"error": ...} as an exception: ConfigError for a refused job file (exit 2, as
// `cohort run`), Error otherwise.
[[noreturn]] void fail(int status, const std::string& body) {
  json j = json::parse(body, nullptr, false);
  std::string msg = j.is_object() && j.contains("error") ? j["error"].get<std::string>() : body;
  if (status == 400) throw ConfigError(msg);
  throw Error(msg + " (HTTP " + std::to_string(status) + ")");
}

std::string when(double t) {
  if (t <= 0) return "-";
  std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string job_id(const Args& args, const char* usage) {
  if (args.positionals().size() != 1) throw ConfigError(std::string("usage: ") + usage);
  const std::string& id = args.positionals()[0];
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    throw ConfigError("JOB: expected a job id (a number, see `cohort jobs`), got '" + id + "'");
  }
  return id;
}

}  // namespace

int submit_main(int argc, char** argv) {
  Args args(argc, argv, {"server", "set", "token-file"}, {"json"});
  if (args.positionals().size() != 1) {
    throw ConfigError("usage: cohort submit JOB.yaml [--set key=value]... [--server URL]");
  }
  const std::string path = args.positionals()[0];
  if (!fs::exists(path)) throw ConfigError(path + ": cannot open the job file");
  ServerClient c(args);
  json body{{"source", path}, {"yaml", read_file(path)}, {"overrides", args.all("set")}};
  auto [status, text] = c.post("/api/jobs", body.dump());
  if (status != 201) fail(status, text);
  json j = json::parse(text);
  if (args.has("json")) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("job %ld (%s) queued: %s%s\n", j.value("id", 0L),
                j.value("name", std::string()).c_str(), c.url().c_str(),
                j.value("url", std::string()).c_str());
  }
  return 0;
}

int jobs_main(int argc, char** argv) {
  Args args(argc, argv, {"server", "token-file"}, {"json"});
  ServerClient c(args);
  auto [status, text] = c.get("/api/jobs");
  if (status != 200) fail(status, text);
  json jobs = json::parse(text);
  if (args.has("json")) {
    std::printf("%s\n", jobs.dump(2).c_str());
    return 0;
  }
  std::printf("%-5s %-20s %-10s %-7s %-15s %-9s %-9s %s\n", "id", "name", "state", "workers",
              "submitted", "duration", "accuracy", "error");
  for (const auto& j : jobs) {
    double started = j["started"].is_number() ? j["started"].get<double>() : 0;
    double finished = j["finished"].is_number() ? j["finished"].get<double>() : 0;
    char duration[32] = "-";
    if (started > 0) {
      double s = (finished > 0 ? finished : static_cast<double>(std::time(nullptr))) - started;
      std::snprintf(duration, sizeof(duration), "%.0f s", std::max(0.0, s));
    }
    char accuracy[32] = "-";
    if (j.contains("summary") && j["summary"].contains("test_accuracy")) {
      std::snprintf(accuracy, sizeof(accuracy), "%.4f", j["summary"].value("test_accuracy", 0.0));
    }
    std::printf("%-5ld %-20s %-10s %-7d %-15s %-9s %-9s %s\n", j.value("id", 0L),
                j.value("name", std::string()).substr(0, 20).c_str(),
                j.value("state", std::string()).c_str(), j.value("workers", 0),
                when(j.value("submitted", 0.0)).c_str(), duration, accuracy,
                j.value("error", std::string()).c_str());
  }
  return 0;
}

int cancel_main(int argc, char** argv) {
  Args args(argc, argv, {"server", "token-file"}, {});
  std::string id = job_id(args, "cohort cancel JOB [--server URL]");
  ServerClient c(args);
  auto [status, text] = c.post("/api/jobs/" + id + "/cancel", "{}");
  if (status != 200 && status != 202) fail(status, text);
  json j = json::parse(text);
  std::printf("job %s: %s\n", id.c_str(), j.value("state", std::string()).c_str());
  return 0;
}

int logs_main(int argc, char** argv) {
  Args args(argc, argv, {"server", "rank", "token-file"}, {});
  // A run directory (a directory with logs/): its logs merged here, no server involved.
  if (args.positionals().size() == 1 && trace::is_run_dir(args.positionals()[0])) {
    if (args.has("server")) throw ConfigError("--server: not for a run directory");
    std::optional<int> rank;
    if (args.has("rank")) {
      long r = args.get_int("rank", -1);
      if (r < 0) throw ConfigError("--rank: expected a rank (0, 1, ...)");
      rank = static_cast<int>(r);
    }
    for (const auto& line : trace::merge_logs(args.positionals()[0], rank)) {
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
    }
    return 0;
  }
  if (args.has("rank")) throw ConfigError("--rank: only for a run directory (RUN_DIR/logs)");
  std::string id = job_id(args, "cohort logs JOB [--server URL] | cohort logs RUN_DIR [--rank R]");
  ServerClient c(args);
  auto [status, text] = c.get("/api/jobs/" + id + "/logs");
  if (status != 200) fail(status, text);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace cohort::cli
