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
// On one host over shared memory a step costs microseconds, not a round trip through the kernel,
// and the ring's many small steps stop dominating much earlier: the crossover no longer grows with
// n. Measured with `cohort bench allreduce` (shared memory, 2 cores, so from 4 ranks on each rank
// waits its turn for a CPU), median µs, the range of 2-5 interleaved runs, ring / halving-doubling:
//            512 KiB                    1 MiB                        2 MiB
//   4 ranks:   423-773 / 205-304          261-361 / 372-461            660-939 / 817-979
//   8 ranks: 1041-1063 / 842-899        1413-1816 / 1525-1674        2149-2288 / 2655-2890
//  16 ranks: 3099-3260 / 2582-2937      4146-6274 / 3721-5793        5885-8017 / 7310-11774
//  32 ranks: 7894-8678 / 6355-6793     8216-11067 / 9831-16824     15981-17295 / 20543-20592
// so halving-doubling below 1 MiB and the ring from there (kSharedMemoryRingMinBytes), where the
// rule for TCP would keep halving-doubling up to 3.75 MiB at 16 ranks and 15.5 MiB at 32.
//
// Unless each CPU holds more than kSharedMemoryRingMaxRanksPerCpu ranks. Then every step costs
// each rank a turn of a CPU, and the ring's 2(n-1) of them outweigh what it gains per byte:
// halving-doubling takes 2 log2(n). Measured the same way (2 cores, so 32 ranks per CPU at 64
// ranks), median ms of 1-2 interleaved runs, ring / halving-doubling:
//                1 MiB                   4 MiB
//    64 ranks:   31.2-37.0 / 41.7-42.3     112-128 / 117-150
//   128 ranks:   75.0-84.2 / 66.4-97.8     283-333 / 211-324
//   256 ranks:       303.7 / 330.4            1640 / 993
//   512 ranks:      1005.1 / 671.0            2884 / 2089
//
// On one host with more ranks than CPUs, in recursive doubling's range, the linear allreduce
// instead: there a step costs each rank a turn of a CPU rather than microseconds, and recursive
// doubling takes log2(n) of them where the linear allreduce takes two (allreduce_linear.cc).
// Measured with `cohort bench allreduce` (shared memory, 2 cores), 4 KiB, the range of the
// medians of 2-4 interleaved runs, µs, recursive doubling / linear:
//     4 ranks: 32-35 / 23-30       8 ranks: 176-241 / 82-164
//    32 ranks: 1388-2303 / 743-1054   128 ranks: 9265-18635 / 8282-13046
// At 256 KiB the successors of recursive doubling win again (32 ranks: 3302-3827 against
// 4125-4529). With a CPU for every rank each step of recursive doubling costs a spin, not a turn,
// and rank 0's n - 1 receives in a row are what remains: the linear allreduce is not picked there,
// nor across hosts, where rank 0's link would carry n - 1 buffers each way.
//
// Across hosts, once the bytes count (above recursive doubling's range), the hierarchical
// allreduce: each host link then carries 2(H-1)/H of the buffer each way instead of the flat
// ring's 2(n-1)/n, and the steps between ranks of one host run over shared memory
// (allreduce_hierarchical.cc). It needs several ranks on some host to differ from the flat ring.
#include "cohort/comm/algorithms.h"

namespace cohort::comm {

Algorithm choose_allreduce(size_t bytes, const WorldShape& world) {
  if (world.size > 1 && bytes <= kRecursiveDoublingMaxBytes) {
    const bool one_crowded_host = world.hosts == 1 && world.shared_memory && world.crowded();
    return one_crowded_host && world.size > 2 ? Algorithm::Linear : Algorithm::RecursiveDoubling;
  }
  if (world.hosts > 1 && world.max_local > 1) return Algorithm::Hierarchical;
  if (world.size <= 2) return Algorithm::Ring;
  const size_t n = static_cast<size_t>(world.size);
  if (world.hosts == 1 && world.shared_memory) {
    const bool ring = bytes >= kSharedMemoryRingMinBytes &&
                      world.ranks_per_cpu <= kSharedMemoryRingMaxRanksPerCpu;
    return ring ? Algorithm::Ring : Algorithm::HalvingDoubling;
  }
  const size_t crossover = n * (n - 1) * (size_t{16} << 10) + 1;
  return bytes < crossover ? Algorithm::HalvingDoubling : Algorithm::Ring;
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
  } else if (algo == Algorithm::Linear) {
    allreduce_linear(ctx, buf, op);
  } else {
    allreduce_ring(ctx, buf, op);
  }
}

}  // namespace cohort::comm
