// Profiles: read back what is written, and every malformed or out-of-range value named by file,
// line and key.
#include <gtest/gtest.h>

#include <string>

#include "cohort/base/error.h"
#include "cohort/sim/profile.h"

namespace cohort::sim {
namespace {

const char* kProfile = R"({
  "profile": 1,
  "name": "test machine",
  "sources": ["by hand"],
  "host": {"cores": 4, "ranks_per_host": 2},
  "transports": {
    "tcp": {"latency_us": 30, "gbytes_per_s": 2.5, "oversubscribed_latency_us": 70, "oversubscribed_exponent": 1.25},
    "shm": {"latency_us": 4, "gbytes_per_s": 6},
    "network": {"latency_us": 50, "gbytes_per_s": 1.25}
  },
  "kernels": {"reduce_gbytes_per_s": 5, "codecs": {"fp16": {"encode_gbytes_per_s": 3, "decode_gbytes_per_s": 4}}},
  "compute": {
    "device": "cpu", "threads": 1, "batch_per_worker": 64,
    "data_ms": 1, "forward_ms": 10, "backward_ms": 20, "optimizer_ms": 2,
    "gradients": [
      {"name": "fc.bias", "bytes": 40, "ready_ms": 0.5},
      {"name": "fc.weight", "bytes": 4000, "rows": 10, "cols": 100, "ready_ms": 1.5}
    ]
  }
})";

std::string error_of(const std::string& text) {
  try {
    parse_profile(text, "p.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string with(const std::string& from, const std::string& to) {
  std::string s = kProfile;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(Profile, ReadsEveryFigureInItsUnit) {
  const Profile p = parse_profile(kProfile, "p.json");
  EXPECT_EQ(p.name, "test machine");
  EXPECT_EQ(p.cores, 4);
  EXPECT_EQ(p.ranks_per_host, 2);
  EXPECT_DOUBLE_EQ(p.tcp.latency_s, 30e-6);
  EXPECT_DOUBLE_EQ(p.tcp.bytes_per_s, 2.5e9);
  EXPECT_DOUBLE_EQ(p.tcp.oversubscribed_latency_s, 70e-6);
  EXPECT_DOUBLE_EQ(p.tcp.oversubscribed_exponent, 1.25);
  ASSERT_TRUE(p.shm);
  EXPECT_DOUBLE_EQ(p.shm->oversubscribed_latency_s, 0);  // not measured
  EXPECT_DOUBLE_EQ(p.shm->bytes_per_s, 6e9);
  EXPECT_DOUBLE_EQ(p.network.bytes_per_s, 1.25e9);
  EXPECT_DOUBLE_EQ(p.reduce_bytes_per_s, 5e9);
  EXPECT_DOUBLE_EQ(p.codecs.at("fp16").decode_bytes_per_s, 4e9);
  EXPECT_DOUBLE_EQ(p.compute.backward_s, 0.020);
  ASSERT_EQ(p.compute.gradients.size(), 2u);
  EXPECT_EQ(p.compute.gradients[0].cols, 10u);  // a vector: rows 1, cols bytes / 4
  EXPECT_EQ(p.compute.gradients[1].rows, 10u);
  EXPECT_DOUBLE_EQ(p.compute.gradients[1].ready_s, 0.0015);
}

TEST(Profile, WhatIsWrittenReadsBackTheSame) {
  const Profile p = parse_profile(kProfile, "p.json");
  const Profile q = parse_profile(profile_json(p), "again.json");
  EXPECT_EQ(profile_json(q), profile_json(p));
  EXPECT_DOUBLE_EQ(q.network.latency_s, p.network.latency_s);
  EXPECT_DOUBLE_EQ(q.tcp.oversubscribed_latency_s, 70e-6);
  EXPECT_DOUBLE_EQ(q.tcp.oversubscribed_exponent, 1.25);
  EXPECT_DOUBLE_EQ(q.shm->oversubscribed_latency_s, 0);
  EXPECT_EQ(q.compute.gradients[1].name, "fc.weight");
}

TEST(Profile, MalformedProfilesNameFileLineAndKey) {
  EXPECT_NE(error_of("{\"profile\": 1,").find("p.json:"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("expected a profile"), std::string::npos);
  const std::string bad_rate = error_of(with("\"gbytes_per_s\": 2.5", "\"gbytes_per_s\": -1"));
  EXPECT_NE(bad_rate.find("p.json:7:"), std::string::npos) << bad_rate;
  EXPECT_NE(bad_rate.find("transports.tcp.gbytes_per_s"), std::string::npos) << bad_rate;
  const std::string crowded = error_of(with("\"oversubscribed_latency_us\": 70", "\"oversubscribed_latency_us\": 20"));
  EXPECT_NE(crowded.find("transports.tcp.oversubscribed_latency_us"), std::string::npos) << crowded;
  EXPECT_NE(crowded.find("at least 30"), std::string::npos) << crowded;
  const std::string steep = error_of(with("\"oversubscribed_exponent\": 1.25", "\"oversubscribed_exponent\": 5"));
  EXPECT_NE(steep.find("transports.tcp.oversubscribed_exponent"), std::string::npos) << steep;
  const std::string typo = error_of(with("\"latency_us\": 30", "\"latncy_us\": 30"));
  EXPECT_NE(typo.find("did you mean"), std::string::npos) << typo;
  EXPECT_NE(typo.find("transports.tcp.latncy_us"), std::string::npos) << typo;
  const std::string missing = error_of(with("\"cores\": 4, ", ""));
  EXPECT_NE(missing.find("host.cores: is missing"), std::string::npos) << missing;
  const std::string text = error_of(with("\"forward_ms\": 10", "\"forward_ms\": \"10\""));
  EXPECT_NE(text.find("compute.forward_ms"), std::string::npos) << text;
  const std::string order = error_of(with("\"ready_ms\": 1.5", "\"ready_ms\": 0.1"));
  EXPECT_NE(order.find("compute.gradients[1].ready_ms"), std::string::npos) << order;
  EXPECT_NE(order.find("p.json:17:"), std::string::npos) << order;
  const std::string late = error_of(with("\"ready_ms\": 1.5", "\"ready_ms\": 25"));
  EXPECT_NE(late.find("ready_ms"), std::string::npos) << late;
  const std::string shape = error_of(with("\"rows\": 10, \"cols\": 100", "\"rows\": 10, \"cols\": 10"));
  EXPECT_NE(shape.find("rows x cols"), std::string::npos) << shape;
  const std::string odd = error_of(with("\"bytes\": 40,", "\"bytes\": 41,"));
  EXPECT_NE(odd.find("multiple of 4"), std::string::npos) << odd;
  const std::string device = error_of(with("\"device\": \"cpu\"", "\"device\": \"tpu\""));
  EXPECT_NE(device.find("compute.device"), std::string::npos) << device;
  std::string empty = kProfile;
  const size_t list = empty.find("\"gradients\": [");
  ASSERT_NE(list, std::string::npos);
  empty.replace(list, empty.find(']', list) - list + 1, "\"gradients\": []");
  const std::string none = error_of(empty);
  EXPECT_NE(none.find("compute.gradients: expected a list of the gradients"), std::string::npos)
      << none;
  const std::string codec = error_of(with("\"fp16\": {", "\"fp17\": {"));
  EXPECT_NE(codec.find("kernels.codecs.fp17"), std::string::npos) << codec;
  const std::string version = error_of(with("\"profile\": 1", "\"profile\": 2"));
  EXPECT_NE(version.find("profile"), std::string::npos) << version;
}

TEST(Profile, TcpCarriesThePayloadOfEachFrameOfALineRate) {
  EXPECT_DOUBLE_EQ(tcp_payload_rate(12.5e6, 1500, 38), 12.5e6 * 1448 / 1538);  // 94.1%
  EXPECT_DOUBLE_EQ(tcp_payload_rate(12.5e6, 1500, 14), 12.5e6 * 1448 / 1514);  // tc's count
  EXPECT_DOUBLE_EQ(tcp_payload_rate(3.125e9, 9000, 38), 3.125e9 * 8948 / 9038);
  EXPECT_THROW(tcp_payload_rate(1e9, 52, 38), Error);
  EXPECT_THROW(tcp_payload_rate(1e9, 1500, -1), Error);
}

TEST(Profile, AFileThatIsNotThereIsNamed) {
  try {
    read_profile("/nonexistent/profile.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/profile.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace cohort::sim
