#include "cohort/store/store_protocol.h"

#include <gtest/gtest.h>

#include "cohort/base/bytes.h"
#include "cohort/base/error.h"

namespace cohort::store {
namespace {

TEST(StoreProtocol, RequestsRoundTrip) {
  std::vector<StoreRequest> reqs = {
      {.op = StoreOp::kSet, .keys = {"k"}, .value = {0, 1, 0, 255}},
      {.op = StoreOp::kGet, .keys = {"k"}, .timeout_ms = 1234},
      {.op = StoreOp::kAdd, .keys = {"n"}, .delta = -42},
      {.op = StoreOp::kCompareSet, .keys = {"c"}, .value = {}, .desired = {7, 0}},
      {.op = StoreOp::kDelete, .keys = {std::string("nul\0key", 7)}},
      {.op = StoreOp::kCheck, .keys = {"a", "b", ""}},
      {.op = StoreOp::kWait, .keys = {}, .timeout_ms = 0},
  };
  for (const auto& q : reqs) {
    StoreRequest d = decode_request(encode_request(q));
    EXPECT_EQ(d.op, q.op);
    EXPECT_EQ(d.keys, q.keys);
    EXPECT_EQ(d.value, q.value);
    EXPECT_EQ(d.desired, q.desired);
    EXPECT_EQ(d.delta, q.delta);
    EXPECT_EQ(d.timeout_ms, q.timeout_ms);
  }
}

TEST(StoreProtocol, ResponsesRoundTrip) {
  StoreResponse v{.status = StoreStatus::kOk, .value = {1, 0, 2}};
  EXPECT_EQ(decode_response(StoreOp::kGet, encode_response(StoreOp::kGet, v)).value, v.value);
  StoreResponse n{.status = StoreStatus::kOk, .number = -5};
  EXPECT_EQ(decode_response(StoreOp::kAdd, encode_response(StoreOp::kAdd, n)).number, -5);
  StoreResponse t{.status = StoreStatus::kTimeout, .missing = {"x", "y"}};
  auto td = decode_response(StoreOp::kWait, encode_response(StoreOp::kWait, t));
  EXPECT_EQ(td.status, StoreStatus::kTimeout);
  EXPECT_EQ(td.missing, t.missing);
  StoreResponse e{.status = StoreStatus::kError, .error = "no"};
  EXPECT_EQ(decode_response(StoreOp::kSet, encode_response(StoreOp::kSet, e)).error, "no");
}

TEST(StoreProtocol, RejectsUnknownOpsAndStatuses) {
  for (uint8_t op : {0, 8, 200}) {
    auto p = encode_request({.op = StoreOp::kDelete, .keys = {"k"}});
    p[0] = op;
    EXPECT_THROW(decode_request(p), ProtocolError) << int(op);
  }
  auto r = encode_response(StoreOp::kSet, {});
  r[0] = 3;
  EXPECT_THROW(decode_response(StoreOp::kSet, r), ProtocolError);
  EXPECT_THROW(decode_request({}), ProtocolError);
}

TEST(StoreProtocol, SingleKeyOpsNeedExactlyOneKey) {
  EXPECT_THROW(decode_request(encode_request({.op = StoreOp::kSet, .keys = {}})), ProtocolError);
  EXPECT_THROW(decode_request(encode_request({.op = StoreOp::kGet, .keys = {"a", "b"}})),
               ProtocolError);
}

TEST(StoreProtocol, RejectsEveryTruncationAndTrailingBytes) {
  auto p = encode_request(
      {.op = StoreOp::kCompareSet, .keys = {"key"}, .value = {1, 2}, .desired = {3, 4, 5}});
  for (size_t n = 0; n < p.size(); ++n) {
    std::vector<uint8_t> cut(p.begin(), p.begin() + n);
    EXPECT_THROW(decode_request(cut), ProtocolError) << n << " of " << p.size() << " bytes";
  }
  p.push_back(0);
  EXPECT_THROW(decode_request(p), ProtocolError);
}

TEST(StoreProtocol, LyingLengthsFailWithoutAllocating) {
  // A key count of 2^32-1 and a value length of 4 GiB in a 10-byte payload.
  ByteWriter w;
  w.put<uint8_t>(uint8_t(StoreOp::kCheck)).put<uint32_t>(0xFFFFFFFFu).put<uint32_t>(1);
  EXPECT_THROW(decode_request(w.bytes()), ProtocolError);
  ByteWriter v;
  v.put<uint8_t>(uint8_t(StoreOp::kSet)).put<uint32_t>(1).put_string("k").put<uint32_t>(~0u);
  EXPECT_THROW(decode_request(v.bytes()), ProtocolError);
}

}  // namespace
}  // namespace cohort::store
