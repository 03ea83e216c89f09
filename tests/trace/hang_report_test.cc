// Hang diagnosis from real flight records: ranks are threads with real communicators over
// loopback; one of them does not take part in a collective, the others time out.
#include "cohort/trace/hang_report.h"

#include <gtest/gtest.h>

#include <latch>
#include <thread>

#include "../comm/world.h"
#include "cohort/base/error.h"
#include "cohort/store/memory_store.h"
#include "cohort/store/prefix_store.h"

namespace cohort::trace {
namespace {

using namespace std::chrono_literals;
using comm::Communicator;
using comm::Phase;
using comm::testing::World;

// Three ranks finish allreduce #1; ranks 0 and 1 enter allreduce #2 (labelled like a DDP bucket)
// and time out after the communicators' short timeout, rank 2 is busy in backward of step 7 and
// never calls it. Allreduce #1, which also makes the ranks' connections, has a deadline of its
// own long enough for a loaded machine.
std::vector<RankInfo> one_rank_stays_away(World& world) {
  std::vector<RankInfo> infos(3);
  world.run([&](int r, Communicator& comm) {
    std::vector<float> a(100000, 1.0f);
    comm.allreduce(Buffer{DType::F32, a.data(), a.size()}, {.timeout = 60s})->wait();
    comm.flight_recorder().set_activity(7, Phase::Backward);
    if (r != 2) {
      auto work = comm.allreduce(Buffer{DType::F32, a.data(), a.size()});
      comm.flight_recorder().set_label(work->sequence(), "bucket 3");
      EXPECT_THROW(work->wait(), TimeoutError);
      infos[static_cast<size_t>(r)].error = "timed out";
    } else {
      std::this_thread::sleep_for(200ms);
    }
  });
  for (int r = 0; r < 3; ++r)
    infos[static_cast<size_t>(r)].report = world[r].flight_recorder().snapshot();
  return infos;
}

TEST(HangDiagnosis, NamesTheRankThatNeverEnteredTheCollective) {
  World world(3, [](comm::CommConfig& c) { c.timeout = 1500ms; });
  auto infos = one_rank_stays_away(world);
  HangDiagnosis d = diagnose_hang(infos);
  EXPECT_EQ(d.culprits, std::vector<int>{2});
  EXPECT_EQ(d.stuck_seq, 2u);
  EXPECT_NE(d.headline.find("rank 2 never entered allreduce #2 (bucket 3, 400.0 KB)"),
            std::string::npos)
      << d.headline;
  EXPECT_NE(d.headline.find("ranks 0, 1 have waited "), std::string::npos) << d.headline;
  EXPECT_NE(d.headline.find("rank 2 last finished #1 and is in backward of step 7"),
            std::string::npos)
      << d.headline;
  const std::string text = d.text();
  EXPECT_NE(text.find("rank 0: gave up on allreduce #2"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 2 flight recorder"), std::string::npos) << text;
  EXPECT_NE(text.find("bucket 3"), std::string::npos) << text;
}

TEST(HangDiagnosis, ARankThatDoesNotAnswerIsNamedWithWhatTheLauncherKnows) {
  World world(3, [](comm::CommConfig& c) { c.timeout = 1500ms; });
  auto infos = one_rank_stays_away(world);
  infos[2].report.reset();
  infos[2].note = "pid 4242 is stopped (SIGSTOP or a debugger)";
  infos[2].last_activity = nlohmann::json{{"step", 7}, {"phase", "backward"}, {"last_done", 1}};
  HangDiagnosis d = diagnose_hang(infos);
  EXPECT_EQ(d.culprits, std::vector<int>{2});
  EXPECT_NE(d.headline.find("rank 2 did not report (pid 4242 is stopped (SIGSTOP or a debugger); "
                            "its last published activity: finished #1, backward of step 7)"),
            std::string::npos)
      << d.headline;
  EXPECT_NE(d.headline.find("ranks 0, 1 have waited"), std::string::npos) << d.headline;
  EXPECT_NE(d.headline.find("in allreduce #2 (bucket 3"), std::string::npos) << d.headline;
}

TEST(HangDiagnosis, NoCollectiveInFlightListsWhatEachRankDoes) {
  comm::FlightRecorder a(0), b(1);
  a.set_activity(3, Phase::Forward);
  b.set_activity(3, Phase::Data);
  HangDiagnosis d = diagnose_hang({{.report = a.snapshot()}, {.report = b.snapshot()}});
  EXPECT_EQ(d.stuck_seq, 0u);
  EXPECT_TRUE(d.culprits.empty());
  EXPECT_NE(d.headline.find("no collective is in flight; rank 0 is in forward of step 3"),
            std::string::npos)
      << d.headline;
  EXPECT_NE(d.headline.find("rank 1 is in data of step 3"), std::string::npos) << d.headline;
}

// A recv whose send never comes, through real communicators: rank 0 waits in a recv from rank 1
// that rank 1, busy elsewhere, never sends; the report names rank 1 and the message.
TEST(HangDiagnosis, NamesTheRankThatNeverSentWhatARecvWaitsFor) {
  World world(3);
  std::vector<RankInfo> infos(3);
  std::latch posted(3), reported(3);
  world.run([&](int r, Communicator& comm) {
    std::vector<float> a(1000, 1.0f);
    comm.allreduce(Buffer{DType::F32, a.data(), a.size()}, {.timeout = 60s})->wait();
    comm.flight_recorder().set_activity(5, Phase::Training);
    std::shared_ptr<comm::Work> work;
    if (r == 0) work = comm.recv(Buffer{DType::F32, a.data(), a.size()}, 1, {.tag = 7});
    posted.arrive_and_wait();
    if (r == 0) {
      for (int k = 0; k < 3; ++k) {
        infos[static_cast<size_t>(k)].report = world[k].flight_recorder().snapshot();
      }
    }
    reported.arrive_and_wait();
    // Now the send comes, and the recv completes.
    if (r == 1) comm.send(Buffer{DType::F32, a.data(), a.size()}, 0, {.tag = 7})->wait();
    if (r == 0) work->wait();
  });
  ASSERT_EQ(infos[0].report->messages.size(), 1u);
  EXPECT_TRUE(infos[1].report->messages.empty());
  EXPECT_TRUE(world[0].flight_recorder().snapshot().messages.empty());  // completed: gone

  HangDiagnosis d = diagnose_hang(infos);
  EXPECT_EQ(d.stuck_seq, 0u);
  EXPECT_EQ(d.culprits, std::vector<int>{1});
  EXPECT_NE(d.headline.find("no collective is in flight; rank 0 has waited "), std::string::npos)
      << d.headline;
  EXPECT_NE(d.headline.find(" s in recv from rank 1 (tag 7, 4.0 KB), which rank 1 never sent "
                            "(posted no send to rank 0 with tag 7); rank 1 is in training of "
                            "step 5"),
            std::string::npos)
      << d.headline;
  EXPECT_NE(d.details[0].find("waiting in recv from rank 1 (tag 7, 4.0 KB) for "),
            std::string::npos)
      << d.details[0];
  EXPECT_NE(d.text().find("in flight: recv from rank 1 (tag 7, 4.0 KB)"), std::string::npos)
      << d.text();
}

// Both sides of a message in flight: neither rank is to blame, the connection is.
TEST(HangDiagnosis, ASendAndItsRecvBothInFlightSuspectTheConnection) {
  comm::FlightRecorder a(0), b(1);
  auto pending = std::make_shared<comm::Work>("p2p", 1);
  a.on_message_posted({.id = 1, .sends = true, .peer = 1, .tag = 2, .count = 10}, pending);
  b.on_message_posted({.id = 1, .sends = false, .peer = 0, .tag = 2, .count = 10}, pending);
  HangDiagnosis d = diagnose_hang({{.report = a.snapshot()}, {.report = b.snapshot()}});
  EXPECT_TRUE(d.culprits.empty());
  EXPECT_NE(d.headline.find("rank 0 has waited "), std::string::npos) << d.headline;
  EXPECT_NE(d.headline.find(" s in send to rank 1 (tag 2, 40 B), and rank 1 has the matching "
                            "recv in flight: suspect the connection between them"),
            std::string::npos)
      << d.headline;
  pending->finish();
  EXPECT_TRUE(a.snapshot().messages.empty());
}

// A broadcast whose root finished its part while the others still wait: the headline says which
// ranks wait and which finished, not that none finished it.
TEST(HangDiagnosis, ARankPastTheStuckCollectiveIsNotSaidToHaveNotFinishedIt) {
  comm::FlightRecorder r0(0), r1(1), r2(2);
  for (comm::FlightRecorder* r : {&r0, &r1, &r2}) {
    r->on_queued({.seq = 1, .kind = comm::OpKind::Broadcast, .count = 4});
    r->on_started(1, comm::Algorithm::Auto);
  }
  r0.on_finished(1, true);
  std::vector<RankInfo> infos(3);
  infos[0].report = r0.snapshot();
  infos[1].report = r1.snapshot();
  infos[2].report = r2.snapshot();
  const HangDiagnosis d = diagnose_hang(infos);
  EXPECT_EQ(d.stuck_seq, 1u);
  EXPECT_EQ(d.headline.find("none finished it"), std::string::npos) << d.headline;
  EXPECT_NE(d.headline.find("ranks 1, 2 entered broadcast #1"), std::string::npos) << d.headline;
  EXPECT_NE(d.headline.find("rank 0 finished its part"), std::string::npos) << d.headline;
}

TEST(FlightRecord, JsonRoundTrips) {
  comm::FlightRecorder rec(5, 8);
  rec.on_queued({.seq = 1, .kind = comm::OpKind::Broadcast, .dtype = DType::I64, .count = 3});
  rec.on_started(1, comm::Algorithm::Auto);
  rec.on_finished(1, true);
  rec.on_queued({.seq = 2, .kind = comm::OpKind::Allreduce, .dtype = DType::BF16, .count = 9});
  rec.on_started(2, comm::Algorithm::HalvingDoubling);
  rec.set_label(2, "bucket 0");
  rec.set_activity(11, Phase::Optimizer);
  comm::FlightSnapshot s = rec.snapshot();
  comm::FlightSnapshot back = snapshot_from_json(nlohmann::json::parse(to_json(s).dump()));
  EXPECT_EQ(back.rank, 5);
  EXPECT_EQ(back.activity.step, 11);
  EXPECT_EQ(back.activity.phase, Phase::Optimizer);
  ASSERT_EQ(back.records.size(), 2u);
  EXPECT_EQ(back.records[1].kind, comm::OpKind::Allreduce);
  EXPECT_EQ(back.records[1].dtype, DType::BF16);
  EXPECT_EQ(back.records[1].algorithm, comm::Algorithm::HalvingDoubling);
  EXPECT_EQ(back.records[1].state, comm::CollectiveState::Started);
  EXPECT_EQ(back.records[1].label, "bucket 0");
  EXPECT_EQ(back.records[0].finished_us, s.records[0].finished_us);
  EXPECT_TRUE(back.messages.empty());
  EXPECT_THROW(snapshot_from_json(nlohmann::json{{"rank", 1}}), Error);

  auto work = std::make_shared<comm::Work>("recv", 1);
  rec.on_message_posted({.id = 4, .sends = false, .peer = 2, .tag = 9, .dtype = DType::I64,
                         .count = 6},
                        work);
  s = rec.snapshot();
  back = snapshot_from_json(nlohmann::json::parse(to_json(s).dump()));
  ASSERT_EQ(back.messages.size(), 1u);
  EXPECT_EQ(back.messages[0].id, 4u);
  EXPECT_FALSE(back.messages[0].sends);
  EXPECT_EQ(back.messages[0].peer, 2);
  EXPECT_EQ(back.messages[0].tag, 9u);
  EXPECT_EQ(back.messages[0].dtype, DType::I64);
  EXPECT_EQ(back.messages[0].bytes(), 48u);
  EXPECT_EQ(back.messages[0].posted_us, s.messages[0].posted_us);
  nlohmann::json bad = to_json(s);
  bad["messages"][0]["op"] = "gossip";
  EXPECT_THROW(snapshot_from_json(bad), Error);
}

// A record of every kind of operation and every element type reads back (a compressed job's
// allreduce_encoded and allgatherv once did not: its hang report lost every rank's record).
TEST(FlightRecord, EveryOperationAndTypeRoundTrips) {
  comm::FlightRecorder rec(0, 64);
  uint64_t seq = 0;
  for (int k = 1; k <= static_cast<int>(comm::kLastOpKind); ++k) {
    rec.on_queued({.seq = ++seq, .kind = static_cast<comm::OpKind>(k), .dtype = DType::F32});
  }
  for (DType t : kAllDTypes) {
    rec.on_queued({.seq = ++seq, .kind = comm::OpKind::Allreduce, .dtype = t});
  }
  comm::FlightSnapshot back =
      snapshot_from_json(nlohmann::json::parse(to_json(rec.snapshot()).dump()));
  ASSERT_EQ(back.records.size(), seq);
  for (int k = 1; k <= static_cast<int>(comm::kLastOpKind); ++k) {
    EXPECT_EQ(back.records[static_cast<size_t>(k - 1)].kind, static_cast<comm::OpKind>(k));
  }
  EXPECT_EQ(back.records.back().dtype, DType::Bool);
}

// Polls the watch as the coordinator does until it reports a stall (false after 10 s).
bool wait_for_stall(HangWatch& watch) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (watch.stalled()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

TEST(HangWatch, ReportersAnswerAndAStallIsSeenOnce) {
  store::MemoryStore backing;
  comm::FlightRecorder r0(0), r1(1);
  r0.set_activity(4, Phase::Backward);
  r1.set_activity(4, Phase::Data);
  // A MemoryStore connection per reporter, as each worker has its own TCP connection.
  struct Shared : store::PrefixStore {
    explicit Shared(store::Store& s) : PrefixStore("x", s) {}
  };
  FlightReporter rep0(std::make_unique<Shared>(backing), "d", r0, 0, 100ms);
  FlightReporter rep1(std::make_unique<Shared>(backing), "d", r1, 1, 100ms);
  store::PrefixStore coordinator("x", backing);
  HangWatch watch(coordinator, "d", 2, /*hang_timeout_s=*/0.5);

  ASSERT_TRUE(wait_for_stall(watch)) << "no stall seen";
  EXPECT_FALSE(watch.stalled());  // once per stall

  auto infos = watch.collect(5s);
  ASSERT_TRUE(infos[0].report.has_value());
  ASSERT_TRUE(infos[1].report.has_value());
  EXPECT_EQ(infos[1].report->activity.phase, Phase::Data);
  EXPECT_EQ(infos[0].last_activity->value("phase", std::string()), "backward");

  // Progress rearms the watch: once rank 1 has moved on, standing still again is a second stall
  // (without the progress none would be reported).
  r1.set_activity(5, Phase::Forward);
  EXPECT_TRUE(wait_for_stall(watch)) << "progress did not rearm the watch";
  publish_final_report(coordinator, "d", r0, "allreduce #9 timed out", true);
  EXPECT_TRUE(watch.timeout_reported());
}

// Rank 1 was lost (it left a final report) and rank 2 replaced it. Watched over the new members,
// the report asks the replacement, and neither blames the lost rank's stale report nor says it
// did not answer.
TEST(HangWatch, TheCurrentMembersAreWatchedAReplacementIncluded) {
  store::MemoryStore backing;
  struct Shared : store::PrefixStore {
    explicit Shared(store::Store& s) : PrefixStore("x", s) {}
  };
  store::PrefixStore coordinator("x", backing);
  comm::FlightRecorder r0(0), lost(1), r2(2);
  lost.on_queued({.seq = 3, .kind = comm::OpKind::Allreduce, .count = 4});
  lost.on_started(3, comm::Algorithm::Auto);
  publish_final_report(coordinator, "d", lost, "allreduce #3 timed out", true);
  r0.set_activity(7, Phase::Backward);
  r2.set_activity(7, Phase::Data);
  FlightReporter rep0(std::make_unique<Shared>(backing), "d", r0, 0, 100ms);
  FlightReporter rep2(std::make_unique<Shared>(backing), "d", r2, 2, 100ms);
  // Reporters answer the requests made after they started: wait until both have published.
  store::PrefixStore debug("d", coordinator);
  debug.wait({"activity/0", "activity/2"}, 5s);
  HangWatch watch(coordinator, "d", 2, /*hang_timeout_s=*/0.5);
  watch.set_members({2, 0});
  EXPECT_FALSE(watch.timeout_reported()) << "the lost rank's final report counted";
  const auto infos = watch.collect(5s);
  ASSERT_EQ(infos.size(), 3u);
  EXPECT_FALSE(infos[1].member);
  ASSERT_TRUE(infos[2].report.has_value()) << "the replacement was not asked";
  EXPECT_EQ(infos[2].report->activity.phase, Phase::Data);
  const HangDiagnosis d = diagnose_hang(infos);
  EXPECT_TRUE(d.culprits.empty()) << d.headline;
  EXPECT_EQ(d.headline.find("rank 1"), std::string::npos) << d.headline;
  ASSERT_EQ(d.details.size(), 2u);
  EXPECT_EQ(d.details[1].rfind("rank 2: ", 0), 0u) << d.details[1];
}

}  // namespace
}  // namespace cohort::trace
