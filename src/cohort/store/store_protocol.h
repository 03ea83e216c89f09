// Wire encoding of TcpStore requests and responses (payloads of kStoreRequest / kStoreResponse
// frames). Little-endian, via ByteWriter / ByteReader:
//   request  = op u8 | key count u32 | keys (u32 length + bytes)... | op fields
//     set: value | compare_set: expected, desired | add: delta i64 | get, wait: timeout_ms u64
//   response = status u8 | status fields
//     ok: value (get, compare_set) or number i64 (add; delete and check as 0/1)
//     timeout: missing key count u32 | keys... | error: message
// Values are u32 length + bytes. One request is in flight per connection: the client sends the
// next request only after it has read the response to the previous one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/store/store.h"

namespace cohort::store {

enum class StoreOp : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCompareSet = 4,
  kDelete = 5,
  kCheck = 6,
  kWait = 7,
};

const char* op_name(StoreOp op);

struct StoreRequest {
  StoreOp op = StoreOp::kSet;
  std::vector<std::string> keys{};
  Bytes value{};    // set: the value; compare_set: the expected value
  Bytes desired{};  // compare_set
  int64_t delta = 0;
  uint64_t timeout_ms = 0;  // get, wait
};

enum class StoreStatus : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

struct StoreResponse {
  StoreStatus status = StoreStatus::kOk;
  Bytes value{};
  int64_t number = 0;
  std::vector<std::string> missing{};  // kTimeout
  std::string error{};                 // kError
};

// Decoders throw ProtocolError on unknown ops or statuses, wrong key counts, truncated payloads and
// trailing bytes. Nothing is allocated beyond what the payload actually holds.
std::vector<uint8_t> encode_request(const StoreRequest& r);
StoreRequest decode_request(const std::vector<uint8_t>& payload);
// The op tells the decoder which ok-fields to expect.
std::vector<uint8_t> encode_response(StoreOp op, const StoreResponse& r);
StoreResponse decode_response(StoreOp op, const std::vector<uint8_t>& payload);

}  // namespace cohort::store
