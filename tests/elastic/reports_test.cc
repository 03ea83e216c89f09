// A worker's reports to its coordinator (elastic/reports.h): sent without blocking the caller,
// kept in order while the store is away, numbered once, and only the newest status kept.
#include "cohort/elastic/reports.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "cohort/elastic/job_protocol.h"
#include "cohort/store/connect.h"
#include "cohort/store/tcp_store.h"

namespace cohort::elastic {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::string kToken = "reports-test-token";

TEST(JobReports, RecordsMadeWhileTheStoreIsAwayArriveInOrderOnceItIsBack) {
  const std::string journal = ::testing::TempDir() + "reports.journal";
  std::filesystem::remove(journal);
  auto server = std::make_unique<store::StoreServer>(
      store::StoreServerOptions{.token = kToken, .journal = journal});
  const net::Endpoint where = server->endpoint();
  JobReports reports(store::connect(where.str(), {.token = kToken, .reconnect_timeout = 200ms}), 4,
                     50ms);
  reports.progress({{"step", 0}});
  reports.event({{"event", "resumed_from_checkpoint"}});
  ASSERT_TRUE(reports.flush(5000ms));
  server.reset();
  // The coordinator is gone: reporting does not wait for it.
  const auto t0 = Clock::now();
  for (int step = 1; step <= 50; ++step) reports.progress({{"step", step}});
  reports.status({{"state", "training"}, {"step", 1}});
  reports.status({{"state", "training"}, {"step", 50}});
  EXPECT_LT(Clock::now() - t0, 100ms);
  EXPECT_FALSE(reports.flush(300ms));
  server = std::make_unique<store::StoreServer>(store::StoreServerOptions{
      .bind_host = where.host, .port = where.port, .token = kToken, .journal = journal});
  ASSERT_TRUE(reports.flush(10000ms));
  store::TcpStore s(where, kToken);
  EXPECT_EQ(s.add(keys::kMetricsNext, 0), 51) << "a record was numbered twice";
  for (long i = 0; i <= 50; ++i)
    EXPECT_EQ(json::parse(store::to_string(s.get(keys::metrics(i))))["step"], i);
  const json e = json::parse(store::to_string(s.get(keys::event(0))));
  EXPECT_EQ(e["rank"], 4);
  EXPECT_EQ(json::parse(store::to_string(s.get(keys::status(4))))["step"], 50);
  server.reset();
  std::filesystem::remove(journal);
}

}  // namespace
}  // namespace cohort::elastic
