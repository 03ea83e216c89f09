#include "cohort/ps/protocol.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cohort/base/error.h"

namespace cohort::ps {
namespace {

TEST(PsProtocol, APushPullRoundTripsAndItsValuesPointIntoThePayload) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  Request q{.op = Op::kPushPull, .shard = 2, .view = 7, .id = 99};
  q.slot = 3;
  q.clock = 41;
  q.lr = 0.05;
  q.push = q.pull = true;
  q.min_version = 38;
  q.wait_ms = 200;
  q.fresh_ms = 45;
  q.counts = {.epoch = 1, .samples = 64, .id_sum = 100, .id_sq_sum = 1000};
  q.ranges = {{10, 2}, {20, 1}};
  q.values = values.data();
  const auto payload = encode_request(q);
  const Request d = decode_request(payload);
  EXPECT_EQ(d.op, Op::kPushPull);
  EXPECT_EQ(d.shard, 2u);
  EXPECT_EQ(d.view, 7);
  EXPECT_EQ(d.id, 99u);
  EXPECT_EQ(d.slot, 3u);
  EXPECT_EQ(d.clock, 41);
  EXPECT_EQ(d.lr, 0.05);
  EXPECT_TRUE(d.push && d.pull);
  EXPECT_EQ(d.min_version, 38);
  EXPECT_EQ(d.wait_ms, 200u);
  EXPECT_EQ(d.fresh_ms, 45u);
  EXPECT_EQ(d.counts, q.counts);
  EXPECT_EQ(d.ranges, q.ranges);
  std::vector<float> got(3);
  std::memcpy(got.data(), d.values, 3 * sizeof(float));
  EXPECT_EQ(got, values);
  const auto* p = static_cast<const uint8_t*>(d.values);
  EXPECT_TRUE(p >= payload.data() && p < payload.data() + payload.size());
}

TEST(PsProtocol, EveryOtherRequestAndTheResponseRoundTrip) {
  Request init{.op = Op::kInit, .shard = 1, .range = {5, 3}, .saved_state = true, .blob = {1, 2}};
  Request d = decode_request(encode_request(init));
  EXPECT_EQ(d.range, init.range);
  EXPECT_TRUE(d.saved_state);
  EXPECT_EQ(d.blob, init.blob);
  Request ctl{.op = Op::kControl, .slot = 4, .action = Control::kRetire};
  d = decode_request(encode_request(ctl));
  EXPECT_EQ(d.action, Control::kRetire);
  EXPECT_EQ(d.slot, 4u);
  Request rep{.op = Op::kReplicate, .blob = encode_request(ctl), .from_server = 2};
  d = decode_request(encode_request(rep));
  EXPECT_EQ(d.from_server, 2u);
  EXPECT_EQ(decode_request(d.blob).action, Control::kRetire);
  Response r{.id = 5,
             .status = Status::kNotPrimary,
             .message = "moved",
             .version = 3,
             .min_clock = 2,
             .applied = 9,
             .stopped = true,
             .duplicate = true,
             .view = 4,
             .body = {7, 8, 9}};
  Response back = decode_response(encode_response(r));
  EXPECT_EQ(back.status, Status::kNotPrimary);
  EXPECT_EQ(back.message, "moved");
  EXPECT_EQ(back.version, 3);
  EXPECT_EQ(back.min_clock, 2);
  EXPECT_EQ(back.applied, 9u);
  EXPECT_TRUE(back.stopped && back.duplicate);
  EXPECT_EQ(back.body, r.body);
  ShardStatus st{.version = 4,
                 .min_clock = 3,
                 .applied = 11,
                 .stopped = false,
                 .slot_clocks = {4, -1},
                 .counts = {{.epoch = 0, .samples = 8}},
                 .staleness = {5, 6}};
  EXPECT_EQ(decode_status(encode_status(st)), st);
}

TEST(PsProtocol, TruncatedTrailingAndLyingMessagesAreProtocolErrors) {
  const std::vector<float> values = {1, 2, 3, 4};
  Request q{.op = Op::kPushPull, .push = true, .ranges = {{0, 4}}, .values = values.data()};
  const auto good = encode_request(q);
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
    EXPECT_THROW(decode_request(cut), ProtocolError) << n;
  }
  auto longer = good;
  longer.push_back(0);
  EXPECT_THROW(decode_request(longer), ProtocolError);
  auto unknown = good;
  unknown[0] = 42;
  EXPECT_THROW(decode_request(unknown), ProtocolError);
  // A range count far beyond the bytes that follow is refused before anything is reserved.
  Request many{.op = Op::kPushPull, .ranges = {{0, 1}}};
  auto lying = encode_request(many);
  const size_t count_at = lying.size() - 16 - 4;
  const uint32_t huge = 0x7fffffff;
  std::memcpy(lying.data() + count_at, &huge, 4);
  EXPECT_THROW(decode_request(lying), ProtocolError);
  // A range whose end overflows.
  Request wrap{.op = Op::kPushPull, .ranges = {{~uint64_t{0}, 2}}};
  EXPECT_THROW(decode_request(encode_request(wrap)), ProtocolError);
  const auto resp = encode_response({.id = 1, .message = "x", .body = {1, 2, 3}});
  for (size_t n = 0; n < resp.size(); ++n) {
    std::vector<uint8_t> cut(resp.begin(), resp.begin() + static_cast<long>(n));
    EXPECT_THROW(decode_response(cut), ProtocolError) << n;
  }
  // The last status a server sends (a hold notice) is read; the one after it is not a status.
  EXPECT_EQ(decode_response(encode_response({.status = Status::kHeld})).status, Status::kHeld);
  auto bad_status = encode_response({.id = 1});
  bad_status[8] = static_cast<uint8_t>(Status::kHeld) + 1;
  EXPECT_THROW(decode_response(bad_status), ProtocolError);
}

}  // namespace
}  // namespace cohort::ps
