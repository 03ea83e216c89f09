// Who may do what on `cohort serve`'s HTTP API, over real loopback sockets: state changes need
// the token and come from no other web origin; reads are open on loopback and closed beyond it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cohort/base/error.h"
#include "cohort/monitor/job_server.h"

namespace cohort::monitor {
namespace {

namespace fs = std::filesystem;
const std::string kToken = "0123456789abcdef0123456789abcdef";

class ServeAccess : public ::testing::Test {
 protected:
  void start(const std::string& bind, bool open_reads = false) {
    home_ = fs::temp_directory_path() /
            ("cohort-access-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(home_);
    server_ = std::make_unique<JobServer>(JobServerOptions{
        .home = home_.string(),
        .bind_host = bind,
        .port = 0,
        .max_workers = 1,
        .cohort_binary = "/bin/false",
        // Every job reaching the handler is refused for its size: nothing is ever started, and
        // a 400 proves the request got past the access check.
        .validate =
            [](const std::string&, const std::string&, const std::vector<std::string>&) {
              return ValidatedJob{.name = "big", .workers = 99, .resolved_yaml = ""};
            },
        .token = kToken,
        .open_reads = open_reads});
    server_->start();
    const std::string url = server_->url();
    port_ = std::stoi(url.substr(url.rfind(':') + 1));
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(10, 0);
  }
  void TearDown() override {
    if (server_) server_->stop();
    fs::remove_all(home_);
  }
  httplib::Result submit(httplib::Headers headers, const std::string& type = "application/json") {
    return client_->Post("/api/jobs", headers, R"({"yaml": "name: x"})", type.c_str());
  }
  static httplib::Headers bearer(const std::string& token) {
    return {{"Authorization", "Bearer " + token}};
  }

  fs::path home_;
  std::unique_ptr<JobServer> server_;
  std::unique_ptr<httplib::Client> client_;
  int port_ = 0;
};

TEST_F(ServeAccess, SubmitAndCancelNeedTheToken) {
  start("127.0.0.1");
  auto none = submit({});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_NE(none->body.find("needs the server's token"), std::string::npos) << none->body;
  auto wrong = submit(bearer(kToken.substr(0, 31) + "0"));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_NE(wrong->body.find("wrong token"), std::string::npos) << wrong->body;
  auto right = submit(bearer(kToken));
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 400) << right->body;  // past the check: refused for its size
  EXPECT_NE(right->body.find("at most 1 at once"), std::string::npos) << right->body;

  auto cancel = client_->Post("/api/jobs/5/cancel", "", "application/json");
  ASSERT_TRUE(cancel);
  EXPECT_EQ(cancel->status, 401);
  auto cancel_ok = client_->Post("/api/jobs/5/cancel", bearer(kToken), "", "application/json");
  ASSERT_TRUE(cancel_ok);
  EXPECT_EQ(cancel_ok->status, 404) << cancel_ok->body;
  // Any other method that could change something is held to the same rule.
  auto del = client_->Delete("/api/jobs/5");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 401);
}

TEST_F(ServeAccess, CrossOriginAndFormRequestsAreRefusedEvenWithTheToken) {
  start("127.0.0.1");
  auto headers = bearer(kToken);
  headers.emplace("Origin", "http://attacker.example");
  auto cross = submit(headers);
  ASSERT_TRUE(cross);
  EXPECT_EQ(cross->status, 403);
  EXPECT_NE(cross->body.find("cross-origin POST refused"), std::string::npos) << cross->body;

  auto site = bearer(kToken);
  site.emplace("Sec-Fetch-Site", "cross-site");
  auto fetch = submit(site);
  ASSERT_TRUE(fetch);
  EXPECT_EQ(fetch->status, 403);

  auto same = bearer(kToken);
  same.emplace("Origin", "http://127.0.0.1:" + std::to_string(port_));
  auto ok = submit(same);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 400) << ok->body;  // the server's own page may

  auto form = submit(bearer(kToken), "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 415) << form->body;
}

TEST_F(ServeAccess, OnLoopbackReadsAreOpenButOnlyForLoopbackHostNames) {
  start("127.0.0.1");
  auto list = client_->Get("/api/jobs");
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 200);
  EXPECT_EQ(list->body, "[]");
  // A page of another domain that resolves to 127.0.0.1 (DNS rebinding) sends its own Host.
  auto rebound = client_->Get("/api/jobs", {{"Host", "attacker.example:" + std::to_string(port_)}});
  ASSERT_TRUE(rebound);
  EXPECT_EQ(rebound->status, 403);
  // A name that only starts like a loopback address is a name.
  auto lookalike = client_->Get("/api/jobs", {{"Host", "127.0.0.1.attacker.example"}});
  ASSERT_TRUE(lookalike);
  EXPECT_EQ(lookalike->status, 403);
  auto other = client_->Get("/api/jobs", {{"Host", "127.9.8.7:" + std::to_string(port_)}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
}

// Found by fuzzing: a refusal quoting a Host header that is not UTF-8 made the JSON reply throw
// (a 500 from the exception handler). Replies now replace such bytes and keep their status.
TEST_F(ServeAccess, ARefusalQuotingBytesThatAreNotUtf8IsStillItsOwnAnswer) {
  start("127.0.0.1");
  auto res = client_->Get("/api/jobs", {{"Host", "attacker\xff\xfe.example"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403) << res->body;
  EXPECT_TRUE(nlohmann::json::accept(res->body)) << res->body;
}

TEST_F(ServeAccess, BeyondLoopbackReadsNeedTheTokenOrTheLoginCookie) {
  start("0.0.0.0");
  auto closed = client_->Get("/api/jobs");
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->status, 401);
  auto page = client_->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 401);
  auto with_header = client_->Get("/api/jobs", bearer(kToken));
  ASSERT_TRUE(with_header);
  EXPECT_EQ(with_header->status, 200);

  auto bad_login = client_->Get("/login?token=nope");
  ASSERT_TRUE(bad_login);
  EXPECT_EQ(bad_login->status, 401);
  auto login = client_->Get("/login?token=" + kToken);
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 302);
  const std::string cookie = login->get_header_value("Set-Cookie");
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("SameSite=Strict"), std::string::npos) << cookie;
  const std::string pair = cookie.substr(0, cookie.find(';'));
  auto with_cookie = client_->Get("/api/jobs", {{"Cookie", pair}});
  ASSERT_TRUE(with_cookie);
  EXPECT_EQ(with_cookie->status, 200);
  // The cookie opens reads only: a change of state still needs the header.
  auto post =
      client_->Post("/api/jobs", {{"Cookie", pair}}, R"({"yaml": "x"})", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 401);
}

TEST_F(ServeAccess, BeyondLoopbackReadsOpenWhenToldSo) {
  start("0.0.0.0", /*open_reads=*/true);
  auto list = client_->Get("/api/jobs");
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 200);
  auto post = submit({});
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 401);
}

TEST(ServeAccessOptions, AShortTokenIsRefused) {
  EXPECT_THROW(JobServer(JobServerOptions{.token = "short"}), ConfigError);
}

}  // namespace
}  // namespace cohort::monitor
