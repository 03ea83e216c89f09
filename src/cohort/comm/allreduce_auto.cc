// How Auto picks an allreduce algorithm.
//
// Halving-doubling needs 2 log2(p) steps (plus two for folding a non-power-of-two world), the
// ring 2(n-1); both move about 2(n-1)/n of the buffer per rank. The ring streams over one fixed
// pair of sockets and keeps its segment pipeline full, but only once its blocks (bytes / n) span
// a few segments; below that each of its 2(n-1) steps is a latency-bound small message and
// halving-doubling's log2(n) steps win. The crossover therefore grows with n (more ring steps,
// smaller blocks): halving-doubling is used up to n(n-1) * 16 KiB. With one peer (2 ranks) the two
// schedules are the same exchange.
//
// Measured on loopback TCP, 2 cores, f32 sum, 256 KiB segments and socket buffers; best busbw
// (GB/s) of a few runs, ring / halving-doubling (a shared machine: trends, not digits):
//   3 ranks:  64 KiB 0.09 / 0.22    1 MiB 0.44 / 0.46    4 MiB 0.67 / 0.62
//   4 ranks:  64 KiB 0.11 / 0.18  256 KiB 0.46 / 0.20    1 MiB 0.41 / 0.26   16 MiB 0.34 / 0.35
//   5 ranks: 256 KiB 0.19 / 0.23
//   8 ranks:  64 KiB 0.04 / 0.04    1 MiB 0.12 / 0.15    4 MiB 0.14 / 0.14
//
// Below both, recursive doubling: log2(n) exchanges of the whole buffer, half the round trips of
// halving-doubling (and of a 2-rank ring), which is what a latency-bound message pays for. It moves
// log2(n) buffers per rank instead of about 2, so it stops paying off once the bytes count.
// Measured the same way, median µs, auto before recursive doubling / recursive doubling:
//   2 ranks:  4 KiB 87 / 56    16 KiB 87 / 65    64 KiB 111 / 108   256 KiB 263 / 269
//   4 ranks:  4 KiB 295 / 220  16 KiB 320 / 262  64 KiB 413 / 465   256 KiB 980 / 1260
//
// Across hosts, once the bytes count (above recursive doubling's range), the hierarchical
// allreduce: each host link then carries 2(H-1)/H of the buffer each way instead of the flat
// ring's 2(n-1)/n, and the steps between ranks of one host run over shared memory
// (allreduce_hierarchical.cc). It needs several ranks on some host to differ from the flat ring.
#include "cohort/comm/algorithms.h"

namespace cohort::comm {

Algorithm choose_allreduce(size_t bytes, int size, int hosts, int max_local) {
  if (size > 1 && bytes <= kRecursiveDoublingMaxBytes) return Algorithm::RecursiveDoubling;
  if (hosts > 1 && max_local > 1) return Algorithm::Hierarchical;
  if (size <= 2) return Algorithm::Ring;
  const size_t n = static_cast<size_t>(size);
  return bytes <= n * (n - 1) * (size_t{16} << 10) ? Algorithm::HalvingDoubling : Algorithm::Ring;
}

void allreduce_with(OpContext& ctx, Buffer buf, ReduceOp op, Algorithm algo) {
  if (algo == Algorithm::Hierarchical) {
    allreduce_hierarchical(ctx, buf, op);
  } else {
    allreduce_flat(ctx, buf, op, algo);
  }
}

void allreduce_flat(OpContext& ctx, Buffer buf, ReduceOp op, Algorithm algo) {
  if (algo == Algorithm::HalvingDoubling) {
    allreduce_halving_doubling(ctx, buf, op);
  } else if (algo == Algorithm::RecursiveDoubling) {
    allreduce_recursive_doubling(ctx, buf, op);
  } else {
    allreduce_ring(ctx, buf, op);
  }
}

}  // namespace cohort::comm
