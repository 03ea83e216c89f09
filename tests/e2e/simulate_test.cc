// `cohort calibrate` and `cohort simulate` for real: a profile measured on this machine, the
// predictions it gives, the report, `cohort diagnose`'s line, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "files.h"
#include "shell.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using cohort::e2e::sh;
using cohort::e2e::slurp;

const std::string kCohort = COHORT_BINARY;

fs::path job_file(const fs::path& dir) {
  std::ofstream(dir / "job.yaml")
      << "name: simjob\nworkers: 2\nthreads_per_worker: 1\n"
      << "model: {name: mlp}\n"
      << "data: {name: synthetic, samples: 4096, shape: [1, 8, 8], classes: 4}\n"
      << "train: {epochs: 1000, max_steps: 40, batch_size: 32}\n"
      << "checkpoint: {every_steps: 0}\n";
  return dir / "job.yaml";
}

// One calibration for the whole suite: it takes a few seconds of benchmarks and two short runs.
class Simulate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(cohort::e2e::fresh_dir("simulate", "suite"));
    const auto r = sh(kCohort + " calibrate " + job_file(*dir_).string() + " --steps 20 --rounds 2 --out " +
                          (*dir_ / "profile.json").string(),
                      300);
    calibrate_code_ = r.exit_code;
    calibrate_output_ = new std::string(r.output);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete calibrate_output_;
  }
  static fs::path* dir_;
  static int calibrate_code_;
  static std::string* calibrate_output_;
  const fs::path& dir() const { return *dir_; }
  std::string profile() const { return (*dir_ / "profile.json").string(); }
  std::string job() const { return (*dir_ / "job.yaml").string(); }
};
fs::path* Simulate::dir_ = nullptr;
int Simulate::calibrate_code_ = -1;
std::string* Simulate::calibrate_output_ = nullptr;

bool positive(const json& v) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0;
}

TEST_F(Simulate, CalibrationWritesACompleteProfileOfThisMachineAndTheJob) {
  ASSERT_EQ(calibrate_code_, 0) << *calibrate_output_;
  const json p = json::parse(slurp(profile()));
  EXPECT_EQ(p["profile"], 1);
  EXPECT_GE(p["host"]["cores"].get<int>(), 1);
  for (const char* t : {"tcp", "shm", "network"}) {
    EXPECT_TRUE(positive(p["transports"][t]["latency_us"])) << t;
    EXPECT_TRUE(positive(p["transports"][t]["gbytes_per_s"])) << t;
  }
  EXPECT_TRUE(positive(p["kernels"]["reduce_gbytes_per_s"]));
  for (const char* c : {"fp16", "bf16", "int8", "topk", "powersgd"}) {
    EXPECT_TRUE(positive(p["kernels"]["codecs"][c]["encode_gbytes_per_s"])) << c;
    EXPECT_TRUE(positive(p["kernels"]["codecs"][c]["decode_gbytes_per_s"])) << c;
  }
  const json& c = p["compute"];
  for (const char* k : {"forward_ms", "backward_ms", "optimizer_ms"})
    EXPECT_TRUE(positive(c[k])) << k;
  EXPECT_GE(c["shared_slowdown"].get<double>(), 1.0);
  EXPECT_EQ(c["batch_per_worker"], 32);
  // The mlp's six tensors, last layer first, each ready no earlier than the one before.
  ASSERT_EQ(c["gradients"].size(), 6u);
  EXPECT_EQ(c["gradients"][0]["bytes"], 4 * 4);         // the last bias: 4 classes
  EXPECT_EQ(c["gradients"][5]["bytes"], 4 * 64 * 256);  // the first weight: 64 inputs x 256
  EXPECT_EQ(c["gradients"][5]["rows"], 256);
  double last = 0;
  for (const auto& g : c["gradients"]) {
    EXPECT_GE(g["ready_ms"].get<double>(), last);
    EXPECT_LE(g["ready_ms"].get<double>(), c["backward_ms"].get<double>());
    last = g["ready_ms"].get<double>();
  }
  EXPECT_GT(last, 0);
  EXPECT_NE(p["sources"][0].get<std::string>().find("cohort calibrate"), std::string::npos);
  // What each of the rounds measured, beside the medians the profile keeps.
  bool rounds = false;
  for (const auto& s : p["sources"]) {
    rounds = rounds || s.get<std::string>().find("compute in 2 rounds") != std::string::npos;
  }
  EXPECT_TRUE(rounds) << p["sources"].dump();
}

TEST_F(Simulate, PredictsEveryWorldAndNamesTheFastestConfiguration) {
  ASSERT_EQ(calibrate_code_, 0) << *calibrate_output_;
  const auto r = sh(kCohort + " simulate " + job() + " --profile " + profile() +
                    " --workers 1,2,16 --ranks-per-host 2 --link 1gbit --json --html " +
                    (dir() / "r.html").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json out = json::parse(r.output);
  ASSERT_EQ(out["worlds"].size(), 3u);
  const json& one = out["worlds"][0];
  EXPECT_EQ(one["rows"].size(), 1u);  // one worker: nothing to choose
  EXPECT_DOUBLE_EQ(one["rows"][0]["prediction"]["efficiency"].get<double>(), 1.0);
  const json& many = out["worlds"][2];
  EXPECT_EQ(many["hosts"], 8);
  EXPECT_EQ(many["rows"][0]["varied"], "job");
  EXPECT_GT(many["rows"].size(), 8u);  // algorithms, bucket sizes, codecs, local SGD
  const size_t best = many["best"].get<size_t>();
  for (const auto& row : many["rows"]) {
    const json& p = row["prediction"];
    EXPECT_GE(p["step_s"].get<double>(), many["rows"][best]["prediction"]["step_s"].get<double>());
    EXPECT_GT(p["efficiency"].get<double>(), 0);
    EXPECT_LE(p["efficiency"].get<double>(), 1.0 + 1e-9);
    EXPECT_TRUE(positive(p["closed_form_step_s"]));
  }
  // Across 8 hosts at 1 Gbit/s the gradients cross the links: bytes on the busiest one.
  EXPECT_GT(many["rows"][0]["prediction"]["link_bytes"].get<double>(), 0);
  const std::string html = slurp(dir() / "r.html");
  EXPECT_NE(html.find("uPlot"), std::string::npos);
  EXPECT_NE(html.find("\"workers\":16"), std::string::npos);
  EXPECT_EQ(html.find("/*DATA*/"), std::string::npos);
}

TEST_F(Simulate, ALineRateInBitsCarriesTheTcpPayloadOfItsFrames) {
  ASSERT_EQ(calibrate_code_, 0) << *calibrate_output_;
  auto step_s = [&](const std::string& link) {
    const auto r = sh(kCohort + " simulate " + job() + " --profile " + profile() +
                      " --workers 8 --ranks-per-host 1 --only-job --json " + link);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return json::parse(r.output)["worlds"][0]["rows"][0]["prediction"]["step_s"].get<double>();
  };
  // 100 Mbit/s of Ethernet frames of 1,538 bytes, each with 1,448 bytes of TCP payload; a rate
  // in bytes is the payload rate itself.
  char bytes[64];
  std::snprintf(bytes, sizeof bytes, "--link %.9fmbyte", 12.5 * 1448 / 1538);
  const double line = step_s("--link 100mbit");
  EXPECT_NEAR(line, step_s(bytes), 1e-6 * line);
  EXPECT_GT(line, step_s("--link 12.5mbyte") * 1.01);  // the gradients cross 8 hosts' links
  std::snprintf(bytes, sizeof bytes, "--link %.9fmbyte", 12.5 * 1448 / 1514);
  EXPECT_NEAR(step_s("--link 100mbit --link-framing 14"), step_s(bytes), 1e-6 * line);
  std::snprintf(bytes, sizeof bytes, "--link %.9fmbyte", 12.5 * 8948 / 9038);
  EXPECT_NEAR(step_s("--link 100mbit --link-mtu 9000"), step_s(bytes), 1e-6 * line);
}

TEST_F(Simulate, DiagnoseSaysWhatTheModelPredictsForARun) {
  ASSERT_EQ(calibrate_code_, 0) << *calibrate_output_;
  const fs::path run = dir() / "run";
  ASSERT_EQ(sh(kCohort + " run " + job() + " --run-dir " + run.string(), 240).exit_code, 0);
  const auto r = sh(kCohort + " diagnose " + run.string() + " --profile " + profile());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: 2 workers on this host should take"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("than predicted"), std::string::npos) << r.output;
  const json d = json::parse(slurp(run / "diagnosis.json"));
  EXPECT_TRUE(positive(d["model"]["predicted_step_s"]));
  EXPECT_TRUE(positive(d["model"]["measured_step_s"]));
  // Without a profile (none given, none in the working directory) it says where one comes from.
  fs::create_directories(dir() / "elsewhere");
  const auto none =
      sh("env -C " + (dir() / "elsewhere").string() + " " + kCohort + " diagnose " + run.string());
  EXPECT_NE(none.output.find("cohort calibrate"), std::string::npos) << none.output;
}

TEST_F(Simulate, BadInputIsRefusedByName) {
  ASSERT_EQ(calibrate_code_, 0) << *calibrate_output_;
  auto simulate = [&](const std::string& args) {
    fs::create_directories(dir() / "elsewhere");  // no ./profile.json there
    return sh("env -C " + (dir() / "elsewhere").string() + " " + kCohort + " simulate " + job() +
              " " + args);
  };
  const auto no_profile = simulate("--workers 4");
  EXPECT_EQ(no_profile.exit_code, 2);
  EXPECT_NE(no_profile.output.find("cohort calibrate"), std::string::npos) << no_profile.output;
  const auto workers = simulate("--profile " + profile() + " --workers 4,zero");
  EXPECT_EQ(workers.exit_code, 2);
  EXPECT_NE(workers.output.find("--workers"), std::string::npos) << workers.output;
  const auto link = simulate("--profile " + profile() + " --workers 4 --link 25");
  EXPECT_EQ(link.exit_code, 2);
  EXPECT_NE(link.output.find("--link 25"), std::string::npos) << link.output;
  const auto mtu =
      simulate("--profile " + profile() + " --workers 4 --link 1gbyte --link-mtu 9000");
  EXPECT_EQ(mtu.exit_code, 2);
  EXPECT_NE(mtu.output.find("line rate"), std::string::npos) << mtu.output;
  const auto tiny = simulate("--profile " + profile() + " --workers 4 --link 1gbit --link-mtu 40");
  EXPECT_EQ(tiny.exit_code, 2);
  EXPECT_NE(tiny.output.find("--link-mtu"), std::string::npos) << tiny.output;
  // A profile with a value out of range: its file, line and key.
  std::string text = slurp(profile());
  const size_t at = text.find("\"reduce_gbytes_per_s\"");
  ASSERT_NE(at, std::string::npos);
  const size_t colon = text.find(':', at), end = text.find_first_of(",\n}", colon);
  text.replace(colon + 1, end - colon - 1, " -3");
  std::ofstream(dir() / "bad.json") << text;
  const auto bad = simulate("--profile " + (dir() / "bad.json").string() + " --workers 4");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("bad.json:"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("kernels.reduce_gbytes_per_s"), std::string::npos) << bad.output;
  // A job file with a typo is refused as `cohort run` refuses it.
  std::ofstream(dir() / "typo.yaml") << "name: x\nmodel: {name: mlp}\ncomm: {bucketmb: 4}\n";
  const auto typo = sh(kCohort + " simulate " + (dir() / "typo.yaml").string() + " --profile " +
                       profile() + " --workers 2");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.output.find("comm.bucketmb"), std::string::npos) << typo.output;
  const auto hosts = simulate("--profile " + profile() + " --workers 8,9 --hosts 4");
  EXPECT_EQ(hosts.exit_code, 2);
  EXPECT_NE(hosts.output.find("--hosts 4 does not divide 9 workers"), std::string::npos)
      << hosts.output;
  // Parameter servers are not modelled: said, not answered as if the job ran allreduce.
  std::ofstream(dir() / "ssp.yaml") << slurp(job()) << "sync: {mode: ssp}\nparameter_servers: 1\n";
  const auto ssp = sh(kCohort + " simulate " + (dir() / "ssp.yaml").string() + " --profile " +
                      profile() + " --workers 2");
  EXPECT_EQ(ssp.exit_code, 2);
  EXPECT_NE(ssp.output.find("not ssp (parameter servers)"), std::string::npos) << ssp.output;
  // Calibration's own options, checked before anything is measured.
  const auto rounds = sh(kCohort + " calibrate " + job() + " --rounds 0 --out " +
                         (dir() / "never.json").string());
  EXPECT_EQ(rounds.exit_code, 2);
  EXPECT_NE(rounds.output.find("--rounds"), std::string::npos) << rounds.output;
  EXPECT_FALSE(fs::exists(dir() / "never.json"));
}

}  // namespace
