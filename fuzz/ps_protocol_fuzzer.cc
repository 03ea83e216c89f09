// The parameter servers' wire decoders (ps/protocol.h) and a saved shard's reader (ps/shard.h)
// on any payload: they refuse with ProtocolError or decode; what they decode encodes back to a
// payload that decodes the same; a decoded push applied to a shard is taken or refused with an
// Error, never read beyond its payload.
#include <cstdint>
#include <cstring>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/ps/protocol.h"
#include "cohort/ps/shard.h"

namespace {

using namespace cohort::ps;

bool same(const Request& a, const Request& b) {
  const bool values = !a.push || a.value_count() == 0 ||
                      std::memcmp(a.values, b.values, a.value_count() * sizeof(float)) == 0;
  return a.op == b.op && a.shard == b.shard && a.view == b.view && a.id == b.id &&
         a.range == b.range && a.saved_state == b.saved_state && a.blob == b.blob &&
         a.slot == b.slot && a.clock == b.clock && a.push == b.push && a.pull == b.pull &&
         a.min_version == b.min_version && a.min_clock == b.min_clock && a.wait_ms == b.wait_ms &&
         a.fresh_ms == b.fresh_ms && a.counts.epoch == b.counts.epoch && a.ranges == b.ranges &&
         a.action == b.action && a.known == b.known && a.from_server == b.from_server && values;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> payload(data, data + size);
  try {
    const Request r = decode_request(payload);
    const std::vector<uint8_t> again = encode_request(r);
    if (!same(decode_request(again), r)) __builtin_trap();
    if (r.op == Op::kPushPull && r.push) {
      // A push as a server takes it: the ranges must lie in the shard, else it is refused.
      Shard shard({.slots = 2}, {0, 64}, std::vector<float>(64, 1.0f));
      try {
        shard.push(r.slot, r.clock, r.lr, r.ranges, r.values, r.counts);
      } catch (const cohort::Error&) {
      }
    }
  } catch (const cohort::ProtocolError&) {
  }
  try {
    const Response r = decode_response(payload);
    const Response back = decode_response(encode_response(r));
    if (back.id != r.id || back.message != r.message || back.body != r.body ||
        back.reached != r.reached || back.held_us != r.held_us) {
      __builtin_trap();
    }
  } catch (const cohort::ProtocolError&) {
  }
  try {
    // Compared as bytes: a count may be NaN, which equals nothing.
    const std::vector<uint8_t> once = encode_status(decode_status(payload));
    if (encode_status(decode_status(once)) != once) __builtin_trap();
  } catch (const cohort::ProtocolError&) {
  }
  try {
    const PauseState s = decode_pause(payload);
    if (!(decode_pause(encode_pause(s)) == s)) __builtin_trap();
  } catch (const cohort::ProtocolError&) {
  }
  for (Correction c : {Correction::None, Correction::DelayCompensation}) {
    try {
      Shard s = Shard::restore({.slots = 2, .correction = c}, payload);
      if (Shard::restore({.slots = 2, .correction = c}, s.save()).save() != s.save()) {
        __builtin_trap();
      }
    } catch (const cohort::ProtocolError&) {
    }
  }
  return 0;
}
