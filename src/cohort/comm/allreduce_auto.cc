// How Auto picks an allreduce algorithm.
//
// Halving-doubling needs 2 log2(p) steps (plus two for folding a non-power-of-two world), the
// ring 2(n-1); both move about 2(n-1)/n of the buffer per rank. So halving-doubling wins while
// per-step latency matters (small and medium messages, and more ranks: its step count grows
// with log n), and the two are level once bandwidth dominates. In a non-power-of-two world the
// fold costs the first 2e ranks a whole extra buffer transfer, which only pays off for smaller
// messages. With one peer (2 ranks) the two schedules are the same exchange.
//
// Thresholds measured on loopback TCP with 2 cores, f32 sum, 512 KiB segments (busbw GB/s, ring
// vs halving-doubling; the machine was shared, so read the trends, not the digits):
//   4 ranks: 64 KiB 0.15 / 0.17, 1 MiB 0.11 / 0.18, 4 MiB 0.16 / 0.13, 16 MiB 0.17 / 0.18
//   8 ranks: 64 KiB 0.02 / 0.04, 1 MiB 0.06 / 0.10, 4 MiB 0.10 / 0.16, 16 MiB 0.10 / 0.10
//   3 ranks: 64 KiB 0.23 / 0.19, 1 MiB 0.40 / 0.50, 16 MiB 0.19 / 0.15
//   5 ranks: 64 KiB 0.13 / 0.12, 1 MiB 0.23 / 0.29, 16 MiB 0.17 / 0.17
#include "cohort/comm/algorithms.h"

namespace cohort::comm {

Algorithm choose_allreduce(size_t bytes, int size) {
  if (size <= 2) return Algorithm::Ring;
  const bool pow2 = (size & (size - 1)) == 0;
  const size_t limit = pow2 ? size_t{8} << 20 : size_t{1} << 20;
  return bytes <= limit ? Algorithm::HalvingDoubling : Algorithm::Ring;
}

}  // namespace cohort::comm
