// The store's wire decoders (store/store_protocol.h) on any payload: they refuse with
// ProtocolError or decode, and what they decode encodes back to a payload that decodes to the
// same request or response.
#include <cstdint>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/store/store_protocol.h"

namespace {

using namespace cohort::store;

bool same(const StoreRequest& a, const StoreRequest& b) {
  return a.op == b.op && a.keys == b.keys && a.value == b.value && a.desired == b.desired &&
         a.delta == b.delta && a.timeout_ms == b.timeout_ms;
}
bool same(const StoreResponse& a, const StoreResponse& b) {
  return a.status == b.status && a.value == b.value && a.number == b.number &&
         a.missing == b.missing && a.error == b.error;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> payload(data, data + size);
  try {
    const StoreRequest r = decode_request(payload);
    if (!same(decode_request(encode_request(r)), r)) __builtin_trap();
  } catch (const cohort::ProtocolError&) {
  }
  for (StoreOp op : {StoreOp::kSet, StoreOp::kGet, StoreOp::kAdd, StoreOp::kCompareSet,
                     StoreOp::kDelete, StoreOp::kCheck, StoreOp::kWait}) {
    try {
      const StoreResponse r = decode_response(op, payload);
      if (!same(decode_response(op, encode_response(op, r)), r)) __builtin_trap();
    } catch (const cohort::ProtocolError&) {
    }
  }
  return 0;
}
