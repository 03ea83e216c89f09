// The parameter servers' wire format: payloads of kPsRequest / kPsResponse frames (net/frame.h),
// little-endian through ByteWriter / ByteReader.
//
//   request  = op u8 | shard u32 | view i64 | id u64 | op fields
//     init       range (offset u64, count u64) | kind u8 (0 the f32 parameters, 1 a saved shard
//                state) | blob (bytes)
//     push_pull  slot u32 | clock i64 | lr f64 | flags u8 (1 push, 2 pull) | min_version i64 |
//                min_clock i64 | wait_ms u32 | fresh_ms u32 |
//                counts (epoch i64, samples f64, id_sum f64, id_sq_sum f64) |
//                range count u32 | ranges... | values (f32 x the ranges' total, push only)
//     status, snapshot   (nothing)
//     control    action u8 | slot u32 | known u32
//     replicate  from_server u32 | inner request (bytes): a request of the kinds above, as the
//                primary applied it
//     sync       shard state (bytes): the whole shard, before the first replicate
//   response = id u64 | status u8 | message | version i64 | min_clock i64 | applied u64 |
//              flags u8 (1 stopped, 2 duplicate, 4 not reached) | view i64 | held_us u64 |
//              body (bytes)
//     body: pull: f32 values; status: slot clocks and sample counts; snapshot: shard state;
//           pause: the held slots and the active ones (encode_slots)
//
// Decoders throw ProtocolError on unknown ops, counts that do not match the bytes, truncated
// payloads and trailing bytes; nothing is allocated beyond what the payload holds. Values are not
// copied out of the frame: a decoded push points into its payload.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "cohort/ps/layout.h"

namespace cohort::ps {

enum class Op : uint8_t {
  kInit = 1,
  kPushPull = 2,
  kStatus = 3,
  kSnapshot = 4,
  kControl = 5,
  kReplicate = 6,
  kSync = 7,
};
const char* op_name(Op op);

enum class Control : uint8_t {
  kStop = 1,    // the job reached its goal: every later answer says stopped
  kRetire = 2,  // this slot's worker is gone for good: clocks no longer wait for it
  // The slot evaluates the model: every other slot's answers wait on this server (answered once
  // each of them has a request waiting here, or after the failure timeout) until kResume. Not a
  // change of the shard: not replicated.
  kPause = 3,
  kResume = 4,
};

// Samples a push's step trained (per data epoch), for the count that proves every sample of an
// epoch was trained once.
struct SampleCounts {
  int64_t epoch = 0;
  double samples = 0, id_sum = 0, id_sq_sum = 0;
  bool operator==(const SampleCounts&) const = default;
};

struct Request {
  Op op = Op::kPushPull;
  uint32_t shard = 0;
  int64_t view = 0;  // the sender's view (view.h)
  uint64_t id = 0;   // echoed in the response
  // init
  Range range{};
  bool saved_state = false;  // the blob is a saved shard (Shard::save), not the parameters
  // init: the parameters (f32) or a saved shard; sync: a saved shard; replicate: the inner
  // request
  std::vector<uint8_t> blob{};
  // push_pull
  uint32_t slot = 0;
  int64_t clock = 0;
  double lr = 0;
  bool push = false, pull = false;
  int64_t min_version = 0;
  // pull: also wait until every slot has pushed below this clock (the end of a job).
  int64_t min_clock = 0;
  // pull: answer after this long even if the versions are not reached (then
  // Response::reached is false); 0: wait as long as it takes.
  uint32_t wait_ms = 0;
  // push_pull (ssp): the pull may wait up to this long for the clock of its push to be applied,
  // once its min_version is reached, so the next step computes on the newest parameters when
  // every worker is about as fast; 0: answered as soon as min_version is reached.
  uint32_t fresh_ms = 0;
  SampleCounts counts{};
  std::vector<Range> ranges{};
  // push: f32 values, the ranges' in order; into the payload decoded (unaligned there: read them
  // with memcpy) or the caller's buffer
  const void* values = nullptr;
  // control
  Control action = Control::kStop;
  // kPause: the slots the sender saw held here so far; answered once more are (or after a
  // short while), with the held and the active slots in the body.
  uint32_t known = 0;
  // replicate
  uint32_t from_server = 0;

  uint64_t value_count() const;
};

enum class Status : uint8_t {
  kOk = 0,
  kError = 1,       // the request cannot be done (message says why); do not retry
  kNotPrimary = 2,  // this server does not serve the shard in its view: find the new primary
  kNotReady = 3,    // the shard has no state yet (nobody initialised it)
  // Not an answer: the answer is ready but held while another worker evaluates (a pause). The
  // request stays in flight, and its timeout starts again from when the next notice is due:
  // sent when the hold begins and every kHeldNotice while it lasts, so that an evaluation longer
  // than a request's timeout does not time out the workers it holds.
  kHeld = 4,
};

// How often a server tells a worker whose answer it holds that it still does (Status::kHeld).
inline constexpr std::chrono::milliseconds kHeldNotice{1000};

struct Response {
  uint64_t id = 0;
  Status status = Status::kOk;
  std::string message{};
  int64_t version = 0;
  int64_t min_clock = 0;
  uint64_t applied = 0;
  bool stopped = false;
  bool duplicate = false;
  bool reached = true;  // a pull's wait was met (false: answered at its wait_ms)
  int64_t view = 0;     // the server's view
  // How long the answer was ready but held while another slot evaluated (kPause).
  uint64_t held_us = 0;
  std::vector<uint8_t> body{};
};

// What a status request returns (its body).
struct ShardStatus {
  int64_t version = 0;
  int64_t min_clock = 0;
  uint64_t applied = 0;
  bool stopped = false;
  std::vector<int64_t> slot_clocks{};  // each slot's next clock (-1: retired)
  std::vector<SampleCounts> counts{};  // by epoch
  std::vector<uint64_t> staleness{};   // histogram of applied gradients' staleness, by clock
  bool operator==(const ShardStatus&) const = default;
};

std::vector<uint8_t> encode_request(const Request& r);
// `payload` must outlive the result (a push's values point into it).
Request decode_request(const std::vector<uint8_t>& payload);
std::vector<uint8_t> encode_response(const Response& r);
Response decode_response(const std::vector<uint8_t>& payload);
std::vector<uint8_t> encode_status(const ShardStatus& s);
// A pause's answer: the slots held on this server and those that push at all.
struct PauseState {
  std::vector<uint32_t> held, active;
  bool operator==(const PauseState&) const = default;
};
std::vector<uint8_t> encode_pause(const PauseState& s);
PauseState decode_pause(const std::vector<uint8_t>& body);
ShardStatus decode_status(const std::vector<uint8_t>& body);

}  // namespace cohort::ps
