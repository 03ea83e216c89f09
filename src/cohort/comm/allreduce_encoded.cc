// Allreduce in a compact wire format, summed in f32 (the collective under fp16, bf16 and int8
// gradient compression).
//
// A ring that forwards partial sums would re-encode them at every hop, adding one rounding of the
// format per rank (and overflowing fp16 on large sums). Here every rank's contribution is encoded
// exactly once and the reduced result exactly once, whatever the number of ranks; accumulation is
// in f32. The bytes each rank sends are those of a ring allreduce, 2(n-1)/n of the buffer, in the
// compact format.
//
// The buffer is cut into n blocks; rank b reduces block b.
//   Encode: rank r encodes every block of its input (its own too, so that every contribution is
//     rounded the same way) and decodes its own block into an f32 accumulator.
//   Scatter, steps s = 1 .. n-1: rank r sends its encoded block r + s to rank r + s and receives
//     rank (r - s)'s encoded block r, adding it into the accumulator as each segment arrives.
//   Rank r divides the accumulator by n (Avg), encodes it once and decodes that into block r.
//   Gather, steps s = 1 .. n-1: rank r sends its encoded result to rank r + s and receives the
//     result of rank r - s, decoding it into place.
// Every rank decodes the same bytes, so all ranks hold the same bits afterwards.
//
// Error feedback: with a residual buffer, rank r gets there what its encodings dropped: x - D(E(x))
// for its contribution, plus, on its own block, f * (a - D(E(a))) for the result a, where f is n
// for Avg (the result is applied by n ranks) and 1 for Sum. So for Avg,
//   n * result + sum over ranks of residual == sum over ranks of input
// up to f32 rounding: adding the residual into the next step's input loses nothing over time.
//
// With one rank nothing goes on the wire: the buffer is left as it is and the residual zeroed.
// Blocks are cut into segments of about chunk_bytes of f32 (a multiple of the format's granule),
// each encoded on its own, so decoding overlaps the transfer of the next segments.
#include <algorithm>
#include <cmath>

#include "cohort/comm/algorithms.h"

namespace cohort::comm {
namespace {

// What error feedback carries to the next step: nothing where the gradient was not finite (an
// overflow), which would otherwise stay in the residual and poison every later step.
inline float carried(float v) {
  return std::isfinite(v) ? v : 0.0f;
}

}  // namespace

void allreduce_encoded(OpContext& ctx, Buffer buf, Encoding& enc, ReduceOp op, Buffer residual) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t count = buf.count;
  auto* x = static_cast<float*>(buf.data);
  auto* res = static_cast<float*>(residual.data);
  if (count == 0) return;
  if (n == 1) {
    if (res) std::fill(res, res + count, 0.0f);
    return;
  }
  const size_t g = std::max<size_t>(enc.granule(), 1);
  const size_t seg = std::max<size_t>(ctx.chunk_bytes / sizeof(float) / g, 1) * g;
  const size_t eseg = enc.encoded_bytes(seg);  // encoded segment k starts at k * eseg
  const Blocks blocks{count, static_cast<size_t>(n)};
  auto len_of = [&](int b) { return blocks.length(static_cast<size_t>(b)); };
  auto off_of = [&](int b) { return blocks.offset(static_cast<size_t>(b)); };
  auto segments = [&](int b) { return ceil_div(len_of(b), seg); };
  auto seg_len = [&](int b, size_t k) { return std::min(seg, len_of(b) - k * seg); };
  auto enc_block_bytes = [&](int b) {
    const size_t len = len_of(b), rem = len % seg;
    return (len / seg) * eseg + (rem ? enc.encoded_bytes(rem) : 0);
  };

  // Scratch: [accumulator: f32 of block r][segment in][encoded result of block r][encoded input].
  auto align = [](size_t v) { return (v + 63) & ~size_t{63}; };
  std::vector<size_t> enc_off(static_cast<size_t>(n) + 1, 0);
  for (int b = 0; b < n; ++b) enc_off[b + 1] = enc_off[b] + align(enc_block_bytes(b));
  const size_t acc_bytes = align(len_of(r) * sizeof(float));
  const size_t in_bytes = align(eseg);
  const size_t result_bytes = align(enc_block_bytes(r));
  uint8_t* base = ctx.scratch_bytes(acc_bytes + in_bytes + result_bytes + enc_off[n]);
  auto* acc = reinterpret_cast<float*>(base);
  uint8_t* seg_in = base + acc_bytes;
  uint8_t* result = seg_in + in_bytes;
  uint8_t* encoded = result + result_bytes;

  // Encode every block of the input; keep what the encoding dropped.
  for (int b = 0; b < n; ++b) {
    for (size_t k = 0; k < segments(b); ++k) {
      const size_t off = off_of(b) + k * seg, len = seg_len(b, k);
      uint8_t* e = encoded + enc_off[b] + k * eseg;
      enc.encode(x + off, len, e);
      if (b == r) {
        float* a = acc + k * seg;
        enc.decode(e, len, a);
        if (res) {
          for (size_t i = 0; i < len; ++i) res[off + i] = carried(x[off + i] - a[i]);
        }
      } else if (res) {
        enc.decode(e, len, res + off);
        for (size_t i = 0; i < len; ++i) res[off + i] = carried(x[off + i] - res[off + i]);
      }
    }
  }

  // Scatter: the contributions to block r arrive from every other rank and are summed in f32.
  for (int s = 1; s < n; ++s) {
    const int to = wrap(r + s, n), from = wrap(r - s, n);
    SendPlan send{
        .peer = to, .count = segments(to), .segment = [&](size_t k) {
          return Segment{encoded + enc_off[to] + k * eseg, enc.encoded_bytes(seg_len(to, k))};
        }};
    RecvPlan recv{
        .peer = from,
        .count = segments(r),
        .segment =
            [&](size_t k) {
              return Segment{seg_in, enc.encoded_bytes(seg_len(r, k))};
            },
        .on_segment = [&](size_t k) { enc.decode_add(seg_in, seg_len(r, k), acc + k * seg); }};
    ctx.run(&send, &recv);
  }

  // The result of block r, encoded once; this rank keeps the decoded copy like everyone else.
  const float f = static_cast<float>(n);
  const size_t off_r = off_of(r);
  for (size_t k = 0; k < segments(r); ++k) {
    float* a = acc + k * seg;
    const size_t len = seg_len(r, k);
    if (op == ReduceOp::Avg) {
      for (size_t i = 0; i < len; ++i) a[i] /= f;
    }
    float* out = x + off_r + k * seg;
    enc.encode(a, len, result + k * eseg);
    enc.decode(result + k * eseg, len, out);
    if (res) {
      const float w = op == ReduceOp::Avg ? f : 1.0f;
      float* rr = res + off_r + k * seg;
      for (size_t i = 0; i < len; ++i) rr[i] = carried(rr[i] + w * (a[i] - out[i]));
    }
  }

  // Gather: every rank's encoded result goes to every other rank.
  for (int s = 1; s < n; ++s) {
    const int to = wrap(r + s, n), from = wrap(r - s, n);
    SendPlan send{.peer = to, .count = segments(r), .segment = [&](size_t k) {
                    return Segment{result + k * eseg, enc.encoded_bytes(seg_len(r, k))};
                  }};
    RecvPlan recv{
        .peer = from,
        .count = segments(from),
        .segment =
            [&](size_t k) {
              return Segment{seg_in, enc.encoded_bytes(seg_len(from, k))};
            },
        .on_segment =
            [&](size_t k) { enc.decode(seg_in, seg_len(from, k), x + off_of(from) + k * seg); }};
    ctx.run(&send, &recv);
  }
}

}  // namespace cohort::comm
