#include "cohort/store/store_protocol.h"

#include <algorithm>

#include "cohort/base/bytes.h"
#include "cohort/base/error.h"

namespace cohort::store {
namespace {

void put_blob(ByteWriter& w, const Bytes& b) {
  w.put<uint32_t>(static_cast<uint32_t>(b.size()));
  w.put_bytes(b.data(), b.size());
}

Bytes get_blob(ByteReader& r) {
  auto n = r.get<uint32_t>();
  const uint8_t* p = r.get_bytes(n);  // bounds-checked before anything is copied
  return Bytes(p, p + n);
}

void put_keys(ByteWriter& w, const std::vector<std::string>& keys) {
  w.put<uint32_t>(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.put_string(k);
}

// More keys than any request of a job of 10,000 workers names; what a server parks a waiter on.
constexpr uint32_t kMaxKeys = 1u << 16;

std::vector<std::string> get_keys(ByteReader& r) {
  auto n = r.get<uint32_t>();
  if (n > kMaxKeys) {
    throw ProtocolError("a store request of " + std::to_string(n) + " keys (at most " +
                        std::to_string(kMaxKeys) + ")");
  }
  std::vector<std::string> keys;
  // Each key takes at least its 4-byte length, so a lying count cannot make us reserve much.
  keys.reserve(std::min<size_t>(n, r.remaining() / 4));
  for (uint32_t i = 0; i < n; ++i) keys.push_back(r.get_string());
  return keys;
}

bool single_key(StoreOp op) {
  return op != StoreOp::kCheck && op != StoreOp::kWait;
}

bool returns_value(StoreOp op) {
  return op == StoreOp::kGet || op == StoreOp::kCompareSet;
}

}  // namespace

const char* op_name(StoreOp op) {
  switch (op) {
    case StoreOp::kSet:
      return "set";
    case StoreOp::kGet:
      return "get";
    case StoreOp::kAdd:
      return "add";
    case StoreOp::kCompareSet:
      return "compare_set";
    case StoreOp::kDelete:
      return "delete";
    case StoreOp::kCheck:
      return "check";
    case StoreOp::kWait:
      return "wait";
  }
  return "?";
}

std::vector<uint8_t> encode_request(const StoreRequest& q) {
  ByteWriter w;
  w.put<uint8_t>(static_cast<uint8_t>(q.op));
  put_keys(w, q.keys);
  switch (q.op) {
    case StoreOp::kSet:
      put_blob(w, q.value);
      break;
    case StoreOp::kCompareSet:
      put_blob(w, q.value);
      put_blob(w, q.desired);
      break;
    case StoreOp::kAdd:
      w.put<int64_t>(q.delta);
      break;
    case StoreOp::kGet:
    case StoreOp::kWait:
      w.put<uint64_t>(q.timeout_ms);
      break;
    case StoreOp::kDelete:
    case StoreOp::kCheck:
      break;
  }
  return w.take();
}

namespace {

StoreRequest decode_request_fields(const std::vector<uint8_t>& payload) {
  ByteReader r(payload);
  StoreRequest q;
  auto op = r.get<uint8_t>();
  if (op < static_cast<uint8_t>(StoreOp::kSet) || op > static_cast<uint8_t>(StoreOp::kWait)) {
    throw ProtocolError("unknown store request type " + std::to_string(op));
  }
  q.op = static_cast<StoreOp>(op);
  q.keys = get_keys(r);
  if (single_key(q.op) && q.keys.size() != 1) {
    throw ProtocolError(std::string("store ") + op_name(q.op) + " request with " +
                        std::to_string(q.keys.size()) + " keys (expected 1)");
  }
  switch (q.op) {
    case StoreOp::kSet:
      q.value = get_blob(r);
      break;
    case StoreOp::kCompareSet:
      q.value = get_blob(r);
      q.desired = get_blob(r);
      break;
    case StoreOp::kAdd:
      q.delta = r.get<int64_t>();
      break;
    case StoreOp::kGet:
    case StoreOp::kWait:
      q.timeout_ms = r.get<uint64_t>();
      break;
    case StoreOp::kDelete:
    case StoreOp::kCheck:
      break;
  }
  if (!r.done()) throw ProtocolError(std::string("trailing bytes in store ") + op_name(q.op));
  return q;
}

}  // namespace

StoreRequest decode_request(const std::vector<uint8_t>& payload) {
  try {
    return decode_request_fields(payload);
  } catch (const ProtocolError& e) {
    throw ProtocolError(std::string("malformed store request: ") + e.what());
  }
}

std::vector<uint8_t> encode_response(StoreOp op, const StoreResponse& s) {
  ByteWriter w;
  w.put<uint8_t>(static_cast<uint8_t>(s.status));
  switch (s.status) {
    case StoreStatus::kOk:
      if (returns_value(op)) {
        put_blob(w, s.value);
      } else {
        w.put<int64_t>(s.number);
      }
      break;
    case StoreStatus::kTimeout:
      put_keys(w, s.missing);
      break;
    case StoreStatus::kError:
      w.put_string(s.error);
      break;
  }
  return w.take();
}

StoreResponse decode_response(StoreOp op, const std::vector<uint8_t>& payload) {
  ByteReader r(payload);
  StoreResponse s;
  auto status = r.get<uint8_t>();
  switch (status) {
    case static_cast<uint8_t>(StoreStatus::kOk):
      if (returns_value(op)) {
        s.value = get_blob(r);
      } else {
        s.number = r.get<int64_t>();
      }
      break;
    case static_cast<uint8_t>(StoreStatus::kTimeout):
      s.missing = get_keys(r);
      break;
    case static_cast<uint8_t>(StoreStatus::kError):
      s.error = r.get_string();
      break;
    default:
      throw ProtocolError("unknown store response status " + std::to_string(status));
  }
  s.status = static_cast<StoreStatus>(status);
  if (!r.done())
    throw ProtocolError(std::string("trailing bytes in store ") + op_name(op) + " response");
  return s;
}

}  // namespace cohort::store
