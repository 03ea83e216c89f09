#include "cohort/ps/protocol.h"

#include "cohort/base/bytes.h"
#include "cohort/base/error.h"

namespace cohort::ps {
namespace {

// Ranges of one request: more than the flat vector could ever need is a malformed request.
constexpr uint32_t kMaxRanges = 1u << 20;

void put_blob(ByteWriter& w, const std::vector<uint8_t>& b) {
  w.put<uint64_t>(b.size());
  w.put_bytes(b.data(), b.size());
}

std::vector<uint8_t> get_blob(ByteReader& r) {
  const auto n = r.get<uint64_t>();
  if (n > r.remaining()) throw ProtocolError("message truncated");
  const uint8_t* p = r.get_bytes(static_cast<size_t>(n));
  return {p, p + n};
}

Op checked_op(uint8_t v) {
  if (v < static_cast<uint8_t>(Op::kInit) || v > static_cast<uint8_t>(Op::kSync)) {
    throw ProtocolError("unknown parameter-server request type " + std::to_string(v));
  }
  return static_cast<Op>(v);
}

void put_push_pull(ByteWriter& w, const Request& q) {
  w.put<uint32_t>(q.slot).put<int64_t>(q.clock).put<double>(q.lr);
  w.put<uint8_t>(static_cast<uint8_t>((q.push ? 1 : 0) | (q.pull ? 2 : 0)));
  w.put<int64_t>(q.min_version).put<int64_t>(q.min_clock).put<uint32_t>(q.wait_ms);
  w.put<uint32_t>(q.fresh_ms);
  w.put<int64_t>(q.counts.epoch).put<double>(q.counts.samples).put<double>(q.counts.id_sum);
  w.put<double>(q.counts.id_sq_sum);
  w.put<uint32_t>(static_cast<uint32_t>(q.ranges.size()));
  for (const Range& r : q.ranges) w.put<uint64_t>(r.offset).put<uint64_t>(r.count);
  if (q.push && q.value_count() > 0) w.put_bytes(q.values, q.value_count() * sizeof(float));
}

void get_push_pull(ByteReader& r, Request& q) {
  q.slot = r.get<uint32_t>();
  q.clock = r.get<int64_t>();
  q.lr = r.get<double>();
  const auto flags = r.get<uint8_t>();
  if (flags & ~3u) throw ProtocolError("unknown push_pull flags " + std::to_string(flags));
  q.push = flags & 1;
  q.pull = flags & 2;
  q.min_version = r.get<int64_t>();
  q.min_clock = r.get<int64_t>();
  q.wait_ms = r.get<uint32_t>();
  q.fresh_ms = r.get<uint32_t>();
  q.counts.epoch = r.get<int64_t>();
  q.counts.samples = r.get<double>();
  q.counts.id_sum = r.get<double>();
  q.counts.id_sq_sum = r.get<double>();
  const auto n = r.get<uint32_t>();
  // Each range takes 16 bytes: a count beyond what is left cannot be honest.
  if (n > kMaxRanges || n > r.remaining() / 16) {
    throw ProtocolError("push_pull names " + std::to_string(n) + " ranges in " +
                        std::to_string(r.remaining()) + " bytes");
  }
  q.ranges.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    Range g{r.get<uint64_t>(), r.get<uint64_t>()};
    if (g.end() < g.offset) throw ProtocolError("push_pull range overflows");
    q.ranges.push_back(g);
  }
  if (q.push) {
    const uint64_t n_values = q.value_count();
    if (n_values > r.remaining() / sizeof(float)) {
      throw ProtocolError("push of " + std::to_string(n_values) + " values carries only " +
                          std::to_string(r.remaining()) + " bytes");
    }
    q.values = r.get_bytes(n_values * sizeof(float));
  }
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kInit:
      return "init";
    case Op::kPushPull:
      return "push_pull";
    case Op::kStatus:
      return "status";
    case Op::kSnapshot:
      return "snapshot";
    case Op::kControl:
      return "control";
    case Op::kReplicate:
      return "replicate";
    case Op::kSync:
      return "sync";
  }
  return "?";
}

uint64_t Request::value_count() const {
  uint64_t n = 0;
  for (const Range& r : ranges) n += r.count;
  return n;
}

std::vector<uint8_t> encode_request(const Request& q) {
  ByteWriter w;
  w.put<uint8_t>(static_cast<uint8_t>(q.op)).put<uint32_t>(q.shard).put<int64_t>(q.view);
  w.put<uint64_t>(q.id);
  switch (q.op) {
    case Op::kInit:
      w.put<uint64_t>(q.range.offset).put<uint64_t>(q.range.count);
      w.put<uint8_t>(q.saved_state ? 1 : 0);
      put_blob(w, q.blob);
      break;
    case Op::kPushPull:
      put_push_pull(w, q);
      break;
    case Op::kStatus:
    case Op::kSnapshot:
      break;
    case Op::kControl:
      w.put<uint8_t>(static_cast<uint8_t>(q.action)).put<uint32_t>(q.slot).put<uint32_t>(q.known);
      break;
    case Op::kReplicate:
      w.put<uint32_t>(q.from_server);
      put_blob(w, q.blob);
      break;
    case Op::kSync:
      put_blob(w, q.blob);
      break;
  }
  return w.take();
}

Request decode_request(const std::vector<uint8_t>& payload) {
  ByteReader r(payload);
  Request q;
  q.op = checked_op(r.get<uint8_t>());
  q.shard = r.get<uint32_t>();
  q.view = r.get<int64_t>();
  q.id = r.get<uint64_t>();
  switch (q.op) {
    case Op::kInit:
      q.range = {r.get<uint64_t>(), r.get<uint64_t>()};
      if (q.range.end() < q.range.offset) throw ProtocolError("init range overflows");
      q.saved_state = r.get<uint8_t>() != 0;
      q.blob = get_blob(r);
      break;
    case Op::kPushPull:
      get_push_pull(r, q);
      break;
    case Op::kStatus:
    case Op::kSnapshot:
      break;
    case Op::kControl: {
      const auto a = r.get<uint8_t>();
      if (a < static_cast<uint8_t>(Control::kStop) || a > static_cast<uint8_t>(Control::kResume)) {
        throw ProtocolError("unknown parameter-server control " + std::to_string(a));
      }
      q.action = static_cast<Control>(a);
      q.slot = r.get<uint32_t>();
      q.known = r.get<uint32_t>();
      break;
    }
    case Op::kReplicate:
      q.from_server = r.get<uint32_t>();
      q.blob = get_blob(r);
      break;
    case Op::kSync:
      q.blob = get_blob(r);
      break;
  }
  if (!r.done()) {
    throw ProtocolError(std::to_string(r.remaining()) + " trailing bytes after a " + op_name(q.op) +
                        " request");
  }
  return q;
}

std::vector<uint8_t> encode_response(const Response& s) {
  ByteWriter w;
  w.put<uint64_t>(s.id).put<uint8_t>(static_cast<uint8_t>(s.status)).put_string(s.message);
  w.put<int64_t>(s.version).put<int64_t>(s.min_clock).put<uint64_t>(s.applied);
  w.put<uint8_t>(
      static_cast<uint8_t>((s.stopped ? 1 : 0) | (s.duplicate ? 2 : 0) | (s.reached ? 0 : 4)));
  w.put<int64_t>(s.view).put<uint64_t>(s.held_us);
  put_blob(w, s.body);
  return w.take();
}

Response decode_response(const std::vector<uint8_t>& payload) {
  ByteReader r(payload);
  Response s;
  s.id = r.get<uint64_t>();
  const auto st = r.get<uint8_t>();
  if (st > static_cast<uint8_t>(Status::kHeld)) {
    throw ProtocolError("unknown parameter-server status " + std::to_string(st));
  }
  s.status = static_cast<Status>(st);
  s.message = r.get_string();
  s.version = r.get<int64_t>();
  s.min_clock = r.get<int64_t>();
  s.applied = r.get<uint64_t>();
  const auto flags = r.get<uint8_t>();
  s.stopped = flags & 1;
  s.duplicate = flags & 2;
  s.reached = !(flags & 4);
  s.view = r.get<int64_t>();
  s.held_us = r.get<uint64_t>();
  s.body = get_blob(r);
  if (!r.done()) throw ProtocolError("trailing bytes after a parameter-server response");
  return s;
}

std::vector<uint8_t> encode_status(const ShardStatus& s) {
  ByteWriter w;
  w.put<int64_t>(s.version).put<int64_t>(s.min_clock).put<uint64_t>(s.applied);
  w.put<uint8_t>(s.stopped ? 1 : 0);
  w.put<uint32_t>(static_cast<uint32_t>(s.slot_clocks.size()));
  for (int64_t c : s.slot_clocks) w.put<int64_t>(c);
  w.put<uint32_t>(static_cast<uint32_t>(s.counts.size()));
  for (const SampleCounts& c : s.counts) {
    w.put<int64_t>(c.epoch).put<double>(c.samples).put<double>(c.id_sum).put<double>(c.id_sq_sum);
  }
  w.put<uint32_t>(static_cast<uint32_t>(s.staleness.size()));
  for (uint64_t n : s.staleness) w.put<uint64_t>(n);
  return w.take();
}

ShardStatus decode_status(const std::vector<uint8_t>& body) {
  ByteReader r(body);
  ShardStatus s;
  s.version = r.get<int64_t>();
  s.min_clock = r.get<int64_t>();
  s.applied = r.get<uint64_t>();
  s.stopped = r.get<uint8_t>() != 0;
  auto count = [&](size_t each) {
    const auto n = r.get<uint32_t>();
    if (n > r.remaining() / each) throw ProtocolError("shard status truncated");
    return n;
  };
  for (uint32_t i = 0, n = count(8); i < n; ++i) s.slot_clocks.push_back(r.get<int64_t>());
  for (uint32_t i = 0, n = count(32); i < n; ++i) {
    SampleCounts c;
    c.epoch = r.get<int64_t>();
    c.samples = r.get<double>();
    c.id_sum = r.get<double>();
    c.id_sq_sum = r.get<double>();
    s.counts.push_back(c);
  }
  for (uint32_t i = 0, n = count(8); i < n; ++i) s.staleness.push_back(r.get<uint64_t>());
  if (!r.done()) throw ProtocolError("trailing bytes after a shard status");
  return s;
}

std::vector<uint8_t> encode_pause(const PauseState& s) {
  ByteWriter w;
  for (const auto* v : {&s.held, &s.active}) {
    w.put<uint32_t>(static_cast<uint32_t>(v->size()));
    for (uint32_t slot : *v) w.put<uint32_t>(slot);
  }
  return w.take();
}

PauseState decode_pause(const std::vector<uint8_t>& body) {
  ByteReader r(body);
  PauseState s;
  for (auto* v : {&s.held, &s.active}) {
    const auto n = r.get<uint32_t>();
    if (n > r.remaining() / 4) throw ProtocolError("pause state truncated");
    for (uint32_t i = 0; i < n; ++i) v->push_back(r.get<uint32_t>());
  }
  if (!r.done()) throw ProtocolError("trailing bytes after a pause state");
  return s;
}

}  // namespace cohort::ps
