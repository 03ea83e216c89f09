// The flight recorder (every collective queued, started, finished), the collective fingerprint
// check, and cutting the connections for fault injection, over real ranks on loopback.
#include "cohort/comm/flight_recorder.h"

#include <gtest/gtest.h>

#include <vector>

#include "cohort/base/error.h"
#include "world.h"

namespace cohort::comm {
namespace {

using namespace std::chrono_literals;
using testing::World;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(FlightRecorder, KeepsTheLastEntriesInOrder) {
  FlightRecorder rec(/*rank=*/3, /*capacity=*/4);
  for (uint64_t seq = 1; seq <= 6; ++seq) {
    rec.on_queued({.seq = seq, .kind = OpKind::Allreduce, .dtype = DType::F32, .count = seq * 10});
    rec.on_started(seq, Algorithm::Ring);
    if (seq < 6) rec.on_finished(seq, true);
  }
  rec.set_label(6, "bucket 2");
  rec.set_label(1, "gone");  // left the ring: ignored
  rec.set_activity(42, Phase::Backward);
  FlightSnapshot s = rec.snapshot();
  EXPECT_EQ(s.rank, 3);
  ASSERT_EQ(s.records.size(), 4u);
  EXPECT_EQ(s.records.front().seq, 3u);
  EXPECT_EQ(s.records.back().seq, 6u);
  EXPECT_EQ(s.records.back().state, CollectiveState::Started);
  EXPECT_EQ(s.records.back().label, "bucket 2");
  EXPECT_EQ(s.records.back().bytes(), 240u);
  EXPECT_EQ(s.records[0].state, CollectiveState::Done);
  EXPECT_GE(s.records[0].finished_us, s.records[0].started_us);
  EXPECT_EQ(rec.last_done(), 5u);
  EXPECT_EQ(s.activity.step, 42);
  EXPECT_EQ(s.activity.phase, Phase::Backward);
  EXPECT_EQ(phase_name(parse_phase("optimizer")), "optimizer");
}

TEST(FlightRecorder, RecordsOnTheWallClockTheTimesItsCallerReadOnTheSteadyClock) {
  FlightRecorder rec(0, /*capacity=*/4);
  const int64_t before = now_us();
  // Queued two seconds ago by the caller's clock, started now, finished now.
  rec.on_queued({.seq = 1, .kind = OpKind::Allreduce, .dtype = DType::F32, .count = 1},
                Clock::now() - 2s);
  rec.on_started(1, Algorithm::Ring, Clock::now());
  rec.on_finished(1, true);
  const int64_t after = now_us();
  const FlightSnapshot snap = rec.snapshot();
  const CollectiveRecord r = snap.records.at(0);
  // The two clocks are each read on their own, to the microsecond, and a thread may be preempted
  // between two reads: a millisecond of slack for where the records lie against now_us()...
  const double slack = 1000;
  EXPECT_NEAR(static_cast<double>(r.queued_us), static_cast<double>(before - 2'000'000),
              slack + static_cast<double>(after - before));
  EXPECT_GE(r.started_us, before - slack);
  EXPECT_LE(r.finished_us, after + slack);
  // ...and none among the recorder's own times, which come from one clock.
  EXPECT_LE(r.queued_us, r.started_us);
  EXPECT_LE(r.started_us, r.finished_us);
  EXPECT_LE(r.finished_us, snap.taken_us);
}

TEST(FlightRecorder, KeepsALatencyHistogramPerOperationAcrossRestarts) {
  FlightRecorder rec(0, /*capacity=*/2);
  uint64_t seq = 0;
  auto run = [&](OpKind kind, bool ok) {
    ++seq;
    rec.on_queued({.seq = seq, .kind = kind, .dtype = DType::F32, .count = 1});
    rec.on_started(seq, Algorithm::Ring);
    rec.on_finished(seq, ok);
  };
  EXPECT_TRUE(rec.latencies().empty());
  for (int i = 0; i < 5; ++i) run(OpKind::Allreduce, true);
  run(OpKind::Broadcast, true);
  run(OpKind::Barrier, false);  // failed: not a latency
  rec.restart();
  seq = 0;
  run(OpKind::Allreduce, true);
  auto l = rec.latencies();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].kind, OpKind::Allreduce);
  EXPECT_EQ(l[0].histogram.count(), 6u);  // more than the ring holds, and across the restart
  EXPECT_EQ(l[1].kind, OpKind::Broadcast);
  EXPECT_EQ(l[1].histogram.count(), 1u);
  EXPECT_GE(l[0].histogram.sum(), 0.0);
}

TEST(FlightRecorder, CommunicatorRecordsEveryCollective) {
  World world(3);
  world.run([&](int r, Communicator& comm) {
    std::vector<float> a(1000, 1.0f), g(3 * 10, 0.0f), in(10, 1.0f);
    comm.allreduce(Buffer{DType::F32, a.data(), a.size()}, {.algorithm = Algorithm::Ring})->wait();
    comm.broadcast(Buffer{DType::F32, a.data(), 5}, {.root = 2})->wait();
    comm.allgather(Buffer{DType::F32, in.data(), 10}, Buffer{DType::F32, g.data(), 30})->wait();
    comm.barrier()->wait();
    FlightSnapshot s = comm.flight_recorder().snapshot();
    ASSERT_EQ(s.records.size(), 4u) << "rank " << r;
    EXPECT_EQ(s.records[0].kind, OpKind::Allreduce);
    EXPECT_EQ(s.records[0].count, 1000u);
    EXPECT_EQ(s.records[0].algorithm, Algorithm::Ring);
    EXPECT_EQ(s.records[1].kind, OpKind::Broadcast);
    EXPECT_EQ(s.records[2].kind, OpKind::Allgather);
    EXPECT_EQ(s.records[3].kind, OpKind::Barrier);
    for (const auto& rec : s.records) {
      EXPECT_EQ(rec.state, CollectiveState::Done);
      EXPECT_GT(rec.queued_us, 0);
      EXPECT_LE(rec.queued_us, rec.started_us);
      EXPECT_LE(rec.started_us, rec.finished_us);
    }
    EXPECT_EQ(comm.flight_recorder().last_done(), 4u);
    auto l = comm.flight_recorder().latencies();
    ASSERT_EQ(l.size(), 4u) << "rank " << r;
    for (const auto& k : l) EXPECT_EQ(k.histogram.count(), 1u) << op_kind_name(k.kind);
  });
}

TEST(CheckCollectives, MatchingCollectivesRunNormally) {
  World world(3, [](CommConfig& c) { c.check_collectives = true; });
  world.run([&](int r, Communicator& comm) {
    std::vector<double> a(777, r + 1.0);
    comm.allreduce(Buffer{DType::F64, a.data(), a.size()})->wait();
    for (double v : a) ASSERT_EQ(v, 6.0);
    comm.broadcast(Buffer{DType::F64, a.data(), 3}, {.root = 1})->wait();
  });
}

TEST(CheckCollectives, ACountMismatchNamesBothRanksAndBothShapes) {
  World world(2, [](CommConfig& c) {
    c.check_collectives = true;
    c.timeout = 20s;
  });
  std::vector<std::string> errors(2);
  std::vector<uint64_t> seqs(2, 0);
  world.run([&](int r, Communicator& comm) {
    std::vector<float> a(100, 1.0f);
    comm.allreduce(Buffer{DType::F32, a.data(), 100})->wait();  // #1 matches
    // #2: rank 1 left one tensor of 10 elements out of its bucket.
    const size_t count = r == 1 ? 90 : 100;
    try {
      comm.allreduce(Buffer{DType::F32, a.data(), count})->wait();
    } catch (const CollectiveMismatchError& e) {
      errors[static_cast<size_t>(r)] = e.what();
      seqs[static_cast<size_t>(r)] = e.sequence();
    }
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    EXPECT_EQ(seqs[static_cast<size_t>(r)], 2u) << e;
    EXPECT_NE(e.find("sequence number 2"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 0"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
    EXPECT_NE(e.find("allreduce #2 of 100 f32"), std::string::npos) << e;
    EXPECT_NE(e.find("allreduce #2 of 90 f32"), std::string::npos) << e;
  }
}

TEST(CheckCollectives, DifferentOperationsUnderOneSequenceNumber) {
  World world(3, [](CommConfig& c) { c.check_collectives = true; });
  std::vector<std::string> errors(3);
  world.run([&](int r, Communicator& comm) {
    std::vector<float> a(8, 1.0f);
    errors[static_cast<size_t>(r)] = error_of([&] {
      if (r == 2) {
        comm.broadcast(Buffer{DType::F32, a.data(), 8}, {.root = 0})->wait();
      } else {
        comm.allreduce(Buffer{DType::F32, a.data(), 8})->wait();
      }
    });
  });
  // Every rank fails; rank 2's error names its broadcast and an allreduce of another rank.
  for (const auto& e : errors) EXPECT_FALSE(e.empty());
  EXPECT_NE(errors[2].find("rank 2 called broadcast #1 of 8 f32 from root 0"), std::string::npos)
      << errors[2];
  EXPECT_NE(errors[2].find("called allreduce #1 of 8 f32, sum"), std::string::npos) << errors[2];
}

TEST(CutConnections, TheNextCollectiveFailsAsOnALostPeer) {
  World world(2, [](CommConfig& c) { c.timeout = 20s; });
  std::vector<std::string> errors(2);
  world.run([&](int r, Communicator& comm) {
    std::vector<float> a(16, 1.0f);
    comm.allreduce(Buffer{DType::F32, a.data(), 16})->wait();
    if (r == 1) comm.cut_connections();
    errors[static_cast<size_t>(r)] = error_of([&] {
      comm.allreduce(Buffer{DType::F32, a.data(), 16})->wait();
    });
    const auto s = comm.flight_recorder().snapshot();
    EXPECT_EQ(s.records.back().state, CollectiveState::Failed);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("allreduce #2"), std::string::npos) << e;
}

}  // namespace
}  // namespace cohort::comm
