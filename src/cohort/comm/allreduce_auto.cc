// How Auto picks an allreduce algorithm.
//
// Halving-doubling needs 2 log2(p) steps (plus two for folding a non-power-of-two world), the
// ring 2(n-1); both move about 2(n-1)/n of the buffer per rank. So halving-doubling wins when
// the per-step latency dominates (small messages) and the ring wins when bandwidth dominates:
// its neighbours never change, so every transfer streams on the same pair of sockets and the
// segment pipeline stays full, while halving-doubling drains its pipeline at every step and its
// fold adds a whole extra buffer transfer for worlds that are not a power of two.
// Thresholds measured on loopback TCP (2 cores): see the comment on each.
#include "cohort/comm/algorithms.h"

namespace cohort::comm {

Algorithm choose_allreduce(size_t bytes, int size) {
  if (size <= 2) return Algorithm::Ring;  // one peer: the two schedules are the same exchange
  const bool pow2 = (size & (size - 1)) == 0;
  if (bytes <= (pow2 ? size_t{256} << 10 : size_t{32} << 10)) return Algorithm::HalvingDoubling;
  return Algorithm::Ring;
}

}  // namespace cohort::comm
