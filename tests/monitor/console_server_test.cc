// The console's HTTP server over real loopback sockets: pages, JSON API, Prometheus, event stream.
#include "cohort/monitor/console_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <future>
#include <thread>

#include "cohort/base/error.h"

namespace cohort::monitor {
namespace {

using nlohmann::json;

json record(int64_t step) {
  return {{"step", step},    {"total_steps", 100},       {"loss", 1.0 / static_cast<double>(step)},
          {"accuracy", 0.5}, {"samples_per_sec", 100.0}, {"steps_per_sec", 5.0}};
}

class ConsoleServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job = std::make_shared<JobMonitor>(JobInfo{.name = "http", .world_size = 2});
    server = std::make_unique<ConsoleServer>(ConsoleServerOptions{});
    server->add_job("", job);
    server->start();
    client = std::make_unique<httplib::Client>("127.0.0.1", server->port());
    client->set_read_timeout(10, 0);
  }
  json get_json(const std::string& path, int expect_status = 200) {
    auto res = client->Get(path);
    EXPECT_TRUE(res) << path;
    if (!res) return json();
    EXPECT_EQ(res->status, expect_status) << path << ": " << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    return json::parse(res->body);
  }

  std::shared_ptr<JobMonitor> job;
  std::unique_ptr<ConsoleServer> server;
  std::unique_ptr<httplib::Client> client;
};

TEST_F(ConsoleServerTest, ServesThePageAndItsAssets) {
  EXPECT_EQ(server->url(), "http://127.0.0.1:" + std::to_string(server->port()) + "/");
  auto page = client->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(page->body.find("assets/uPlot.iife.min.js"), std::string::npos);
  for (const char* asset : {"uPlot.iife.min.js", "uPlot.min.css", "console.js", "console.css"}) {
    auto res = client->Get(std::string("/assets/") + asset);
    ASSERT_TRUE(res) << asset;
    EXPECT_EQ(res->status, 200) << asset;
    EXPECT_GT(res->body.size(), 500u) << asset;
  }
  // uPlot is the library from npm, not a stand-in.
  EXPECT_NE(client->Get("/assets/uPlot.iife.min.js")->body.find("uPlot"), std::string::npos);
  EXPECT_EQ(client->Get("/assets/missing.js")->status, 404);
  EXPECT_EQ(client->Get("/assets/..%2Fconsole.html")->status, 404);
}

TEST_F(ConsoleServerTest, JsonApiReflectsTheJob) {
  job->add_metric(record(10));
  job->add_metric(record(20));
  job->add_event({{"time", 1.0}, {"event", "job_started"}});
  json j = get_json("/api/job");
  EXPECT_EQ(j["name"], "http");
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["step"], 20);
  EXPECT_EQ(get_json("/api/workers").size(), 2u);
  EXPECT_EQ(get_json("/api/metrics").size(), 2u);
  json later = get_json("/api/metrics?since=10");
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0]["step"], 20);
  EXPECT_EQ(get_json("/api/events")[0]["event"], "job_started");
  json bad = get_json("/api/metrics?since=ten", 400);
  EXPECT_EQ(bad["error"], "since: expected an integer step, got \"ten\"");
}

TEST_F(ConsoleServerTest, PrometheusEndpointUsesTheTextFormat) {
  job->add_metric(record(40));
  auto res = client->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(res->body.find("# TYPE cohort_step gauge\ncohort_step 40\n"), std::string::npos);
}

// Reads server-sent events from /api/stream on a thread; each "update" event's data is queued.
class StreamReader {
 public:
  explicit StreamReader(uint16_t port) {
    thread_ = std::thread([this, port] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(30, 0);
      c.Get(
          "/api/stream",
          [this](const httplib::Response& res) {
            std::lock_guard lk(mu_);
            status_ = res.status;
            cv_.notify_all();
            return res.status == 200;
          },
          [this](const char* data, size_t n) {
            std::lock_guard lk(mu_);
            buf_.append(data, n);
            for (size_t end; (end = buf_.find("\n\n")) != std::string::npos;) {
              std::string ev = buf_.substr(0, end);
              buf_.erase(0, end + 2);
              auto d = ev.find("data: ");
              if (ev.rfind("event: update", 0) == 0 && d != std::string::npos) {
                events_.push_back(json::parse(ev.substr(d + 6)));
              }
            }
            cv_.notify_all();
            return !stop_.load();
          });
      std::lock_guard lk(mu_);
      if (status_ == 0) status_ = -1;  // no answer
      cv_.notify_all();
    });
  }
  ~StreamReader() {
    stop_ = true;
    thread_.join();
  }
  // The HTTP status of the stream's response (-1: none came).
  int status() {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(20), [&] { return status_ != 0; });
    return status_;
  }
  // Waits for the n-th update (1-based).
  json update(size_t n) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(20), [&] { return events_.size() >= n; });
    return events_.size() >= n ? events_[n - 1] : json();
  }

 private:
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string buf_;
  std::vector<json> events_;
  int status_ = 0;
  std::atomic<bool> stop_{false};
};

TEST_F(ConsoleServerTest, EventStreamSendsEverythingFirstThenOnlyWhatIsNew) {
  job->add_metric(record(10));
  StreamReader stream(server->port());
  json first = stream.update(1);
  ASSERT_FALSE(first.is_null());
  EXPECT_EQ(first["metrics"].size(), 1u);
  EXPECT_EQ(first["workers"].size(), 2u);
  job->add_metric(record(20));
  job->add_event({{"time", 2.0}, {"event", "checkpoint"}});
  // The two changes may arrive in one update or two; together they are exactly the new ones.
  json second = stream.update(2);
  ASSERT_FALSE(second.is_null());
  size_t metrics = second["metrics"].size(), events = second["events"].size();
  if (metrics + events < 2) {
    json third = stream.update(3);
    ASSERT_FALSE(third.is_null());
    metrics += third["metrics"].size();
    events += third["events"].size();
  }
  EXPECT_EQ(metrics, 1u);
  EXPECT_EQ(events, 1u);
  EXPECT_EQ(stream.update(2)["job"]["name"], "http");
  job->add_metric(record(30));  // wake the stream so the reader sees it stop
}

TEST_F(ConsoleServerTest, StopEndsOpenStreamsPromptly) {
  StreamReader stream(server->port());
  ASSERT_FALSE(stream.update(1).is_null());
  auto t0 = std::chrono::steady_clock::now();
  server->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// Streams cannot take every thread: past max_streams a stream is refused (503) and the rest of
// the API still answers; a stream whose client has gone is noticed within seconds (its next
// keep-alive fails) and frees its place.
TEST(ConsoleServer, EventStreamsAreBoundedAndFreedWhenTheirClientGoes) {
  auto job = std::make_shared<JobMonitor>(JobInfo{.name = "bounded", .world_size = 1});
  ConsoleServer server(ConsoleServerOptions{.threads = 8, .max_streams = 2});
  server.add_job("", job);
  server.start();
  auto a = std::make_unique<StreamReader>(server.port());
  StreamReader b(server.port());
  ASSERT_FALSE(a->update(1).is_null());
  ASSERT_FALSE(b.update(1).is_null());
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(10, 0);
  auto refused = c.Get("/api/stream");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_NE(refused->body.find("too many event streams open (2)"), std::string::npos);
  auto api = c.Get("/api/job");
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 200);
  a.reset();  // its client goes
  std::unique_ptr<StreamReader> again;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    again = std::make_unique<StreamReader>(server.port());
    if (again->status() == 200) break;
    again.reset();
    ASSERT_TRUE(c.Get("/api/job"));  // a request between tries, not a sleep
  }
  ASSERT_TRUE(again) << "the place of a stream whose client went was never freed";
  EXPECT_FALSE(again->update(1).is_null());
  job->add_metric(record(1));  // wake the streams so their readers see them stop
  server.stop();
}

TEST(ConsoleServer, APortInUseIsAClearError) {
  auto job = std::make_shared<JobMonitor>(JobInfo{.name = "a"});
  ConsoleServer first(ConsoleServerOptions{});
  first.add_job("", job);
  first.start();
  ConsoleServer second(ConsoleServerOptions{.port = first.port()});
  second.add_job("", job);
  try {
    second.start();
    FAIL() << "bound a port already in use";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort::monitor
