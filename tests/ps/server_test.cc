// Parameter servers and their clients over real sockets: ssp and async, replication and
// failover, and what a server does with bad input.
#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <numeric>
#include <thread>

#include "../store/store_test_wire.h"
#include "cohort/base/error.h"
#include "cohort/ps/client.h"
#include "cohort/ps/protocol.h"
#include "ps_cluster.h"

namespace cohort::ps {
namespace {

using testing::PsCluster;

ServerSettings settings(int servers, int slots, Consistency c,
                        OptimizerSettings opt = {.kind = OptimizerKind::Sgd}) {
  return {.servers = servers,
          .shard = {.slots = slots, .consistency = c, .optimizer = opt},
          .heartbeat = Millis(50),
          .failure_timeout = Millis(1000)};
}

// A gradient that differs by slot, clock and position.
std::vector<float> gradient(uint32_t slot, int64_t clock, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] =
        0.01f * static_cast<float>((slot + 1) * (i % 7 + 1)) + 0.001f * static_cast<float>(clock);
  }
  return g;
}

std::vector<float> initial(size_t n) {
  std::vector<float> p(n);
  std::iota(p.begin(), p.end(), 1.0f);
  return p;
}

TEST(ParameterServers, SspZeroIsSynchronousSgdOnTheSumAcrossShards) {
  PsCluster cluster(settings(3, 2, Consistency::Ssp));
  const Layout layout({5, 11, 2}, 3);  // keys split across shards
  Client w0(cluster.client_options(0), layout), w1(cluster.client_options(1), layout);
  w0.init(initial(layout.total()))->wait();
  w1.init(initial(layout.total()))->wait();  // a second init changes nothing
  const auto keys = w0.all_keys();
  std::vector<float> expect = initial(layout.total());
  std::vector<float> p0(layout.total()), p1(layout.total());
  const double lr = 0.5;
  for (int64_t c = 0; c < 4; ++c) {
    const auto g0 = gradient(0, c, layout.total()), g1 = gradient(1, c, layout.total());
    PullInfo i0, i1;
    auto a = w0.push_pull(keys, g0, p0, {.clock = c, .lr = lr, .min_version = c + 1}, &i0);
    if (c == 0) {
      // s = 0: worker 0's pull needs worker 1's push of the same clock. Once every shard has
      // worker 0's push (its slot's next clock is 1), its answer is held there.
      const Deadline d = Deadline::after(Millis(5000));
      auto pushed_everywhere = [&] {
        for (const ShardStatus& st : w1.status()) {
          if (st.slot_clocks.empty() || st.slot_clocks[0] < 1) return false;
        }
        return true;
      };
      while (!pushed_everywhere() && !d.expired()) std::this_thread::sleep_for(Millis(5));
      ASSERT_TRUE(pushed_everywhere()) << "worker 0's push of clock 0 did not reach every shard";
      EXPECT_FALSE(a->is_completed());
    }
    auto b = w1.push_pull(keys, g1, p1, {.clock = c, .lr = lr, .min_version = c + 1}, &i1);
    a->wait();
    b->wait();
    for (size_t i = 0; i < expect.size(); ++i) {
      expect[i] -= static_cast<float>(lr) * (g0[i] + g1[i]);
    }
    EXPECT_EQ(i0.version, c + 1);
    EXPECT_EQ(p0, p1);
    for (size_t i = 0; i < expect.size(); ++i) ASSERT_NEAR(p0[i], expect[i], 1e-5) << i;
  }
}

TEST(ParameterServers, AsyncWithOneWorkerIsSequentialSgdWithMomentum) {
  const OptimizerSettings opt{.kind = OptimizerKind::Sgd, .momentum = 0.9, .weight_decay = 0.01};
  PsCluster cluster(settings(2, 1, Consistency::Async, opt));
  const Layout layout({4, 3}, 2);
  Client w(cluster.client_options(0), layout);
  w.init(initial(layout.total()))->wait();
  std::vector<float> local = initial(layout.total()), got(layout.total());
  OptimizerState state;
  const auto keys = w.all_keys();
  for (int64_t c = 0; c < 5; ++c) {
    const auto g = gradient(0, c, layout.total());
    w.push_pull(keys, g, got, {.clock = c, .lr = 0.1})->wait();
    optimizer_step(opt, state, local, g, 0.1);
    for (size_t i = 0; i < local.size(); ++i) ASSERT_NEAR(got[i], local[i], 1e-5);
  }
}

TEST(ParameterServers, AsyncFastWorkerDoesNotWaitForASilentOne) {
  PsCluster cluster(settings(1, 2, Consistency::Async));
  const Layout layout({8}, 1);
  Client fast(cluster.client_options(0), layout);
  fast.init(initial(8))->wait();
  std::vector<float> out(8);
  PullInfo info;
  for (int64_t c = 0; c < 20; ++c) {
    fast.push_pull(fast.all_keys(), gradient(0, c, 8), out, {.clock = c, .lr = 0.1}, &info)
        ->wait(Millis(2000));
  }
  EXPECT_EQ(info.version, 20);
  EXPECT_EQ(info.min_clock, 0);  // slot 1 never pushed: the staleness it would report is 20
}

// ssp: a push's answer may wait (fresh) for the clock it pushed to be complete, so the next step
// computes on the newest parameters; past that wait only the staleness bound holds it.
TEST(ParameterServers, SspHoldsAPushsAnswerForItsOwnClockUpToItsFreshWait) {
  PsCluster cluster(settings(2, 2, Consistency::Ssp));
  const Layout layout({6, 4}, 2);
  Client w0(cluster.client_options(0), layout), w1(cluster.client_options(1), layout);
  w0.init(initial(layout.total()))->wait();
  const auto keys = w0.all_keys();
  std::vector<float> p0(layout.total()), p1(layout.total());
  PullInfo i0, i1;
  // A push reads its gradient until its work completes: each lives past its wait.
  const size_t n = layout.total();
  const auto g00 = gradient(0, 0, n), g10 = gradient(1, 0, n), g01 = gradient(0, 1, n),
             g02 = gradient(0, 2, n), g11 = gradient(1, 1, n);
  // Clock 0 (s = 1: version 0 would do): worker 0's answer waits for worker 1's push.
  auto a = w0.push_pull(keys, g00, p0,
                        {.clock = 0, .lr = 0.1, .min_version = 0, .fresh = Millis(60000)}, &i0);
  auto b = w1.push_pull(keys, g10, p1, {.clock = 0, .lr = 0.1, .min_version = 0}, &i1);
  a->wait(Millis(10000));
  b->wait(Millis(10000));
  EXPECT_EQ(i0.version, 1);
  // Clock 1: worker 1 does not push it; worker 0 is answered at its fresh wait with version 1,
  // which the bound allows.
  const auto t = Clock::now();
  a = w0.push_pull(keys, g01, p0, {.clock = 1, .lr = 0.1, .min_version = 1, .fresh = Millis(80)},
                   &i0);
  a->wait(Millis(10000));
  EXPECT_GE(Clock::now() - t, Millis(80));
  EXPECT_EQ(i0.version, 1);
  EXPECT_TRUE(i0.reached);
  // The bound still holds whatever the fresh wait: clock 2 needs version 2, i.e. worker 1's
  // push of clock 1.
  a = w0.push_pull(keys, g02, p0, {.clock = 2, .lr = 0.1, .min_version = 2, .fresh = Millis(1)},
                   &i0);
  b = w1.push_pull(keys, g11, p1, {.clock = 1, .lr = 0.1, .min_version = 1}, &i1);
  a->wait(Millis(10000));
  b->wait(Millis(10000));
  EXPECT_GE(i0.version, 2);
}

// Pushes clocks [from, to) from both workers (ssp, s = 1) and returns the parameters after them.
std::vector<float> train(Client& w0, Client& w1, int64_t from, int64_t to,
                         std::vector<float>& expect, size_t* acked) {
  const size_t n = expect.size();
  std::vector<float> p0(n), p1(n);
  const auto keys = w0.all_keys();
  for (int64_t c = from; c < to; ++c) {
    const auto g0 = gradient(0, c, n), g1 = gradient(1, c, n);
    auto a = w0.push_pull(keys, g0, p0, {.clock = c, .lr = 0.1, .min_version = c});
    auto b = w1.push_pull(keys, g1, p1, {.clock = c, .lr = 0.1, .min_version = c});
    a->wait();
    b->wait();
    *acked += 2;
    for (size_t i = 0; i < n; ++i) expect[i] -= 0.1f * (g0[i] + g1[i]);
  }
  // With s = 1 the last pulls need not hold the last clock: a pull that waits for it does.
  w0.pull(keys, p0, {.min_version = to})->wait();
  return p0;
}

TEST(ParameterServers, AKilledServersShardsMoveToTheirBackupsAndNoAcknowledgedPushIsLost) {
  PsCluster cluster(settings(3, 2, Consistency::Ssp));
  const Layout layout({30, 7}, 3);
  Client w0(cluster.client_options(0), layout), w1(cluster.client_options(1), layout);
  w0.init(initial(layout.total()))->wait();
  std::vector<float> expect = initial(layout.total());
  size_t acked = 0;
  train(w0, w1, 0, 5, expect, &acked);

  // Server 1 (primary of shard 1, backup of shard 0) dies; shard 1 moves to server 2.
  cluster.kill(1);
  ASSERT_TRUE(cluster.wait_view([](const View& v) { return v.shards[1].primary == 2; }));
  train(w0, w1, 5, 10, expect, &acked);

  // Its replacement backs every shard left without a backup, once their primaries copied them,
  // and then takes shard 1 back (the hand-back test below looks at that closely).
  cluster.replace(1);
  ASSERT_TRUE(cluster.wait_view([](const View& v) { return v.servers[1].up; }));
  train(w0, w1, 10, 12, expect, &acked);  // the copies are made while training goes on
  const Deadline d = Deadline::after(Millis(5000));
  while (!(cluster.synced(0, 1) && cluster.synced(1, 1)) && !d.expired()) {
    std::this_thread::sleep_for(Millis(10));
  }
  ASSERT_TRUE(cluster.synced(0, 1) && cluster.synced(1, 1));
  ASSERT_TRUE(cluster.wait_view([](const View& v) {
    return v.shards[0].backup == 1 && v.shards[1].primary == 1 && v.shards[1].backup == 2;
  }));

  // Now server 2 dies, holding shards 1 (backup) and 2 (primary): shard 2 moves to server 0, and
  // shard 1 stays with the replacement, which only ever got it by a copy.
  cluster.kill(2);
  ASSERT_TRUE(cluster.wait_view(
      [](const View& v) { return v.shards[1].primary == 1 && v.shards[2].primary == 0; }));
  const auto last = train(w0, w1, 12, 16, expect, &acked);
  for (size_t i = 0; i < expect.size(); ++i) ASSERT_NEAR(last[i], expect[i], 1e-4) << i;
  EXPECT_FALSE(cluster.failure().has_value());

  // Every shard applied exactly the pushes that were acknowledged.
  for (const ShardStatus& s : w0.status()) {
    EXPECT_EQ(s.applied, acked);
    EXPECT_EQ(s.version, 16);
  }
}

// Three servers and two workers that trained some clocks before server 1 (shard 1's primary)
// was killed: shard 1 is at server 2 until server 1's replacement takes it back.
class HandBack : public ::testing::Test {
 protected:
  HandBack()
      : cluster(settings(3, 2, Consistency::Ssp)),
        layout({30, 7, 12}, 3),
        w0(cluster.client_options(0), layout),
        w1(cluster.client_options(1), layout),
        expect(initial(layout.total())) {
    w0.init(initial(layout.total()))->wait();
    first = cluster.view();
  }
  void train_and_lose_server_1(int64_t clocks) {
    train(w0, w1, 0, clocks, expect, &acked);
    cluster.kill(1);
    ASSERT_TRUE(cluster.wait_view([](const View& v) { return v.shards[1].primary == 2; }));
  }

  PsCluster cluster;
  const Layout layout;
  Client w0, w1;
  View first;  // the first view, which the hand-back restores
  std::vector<float> expect;
  size_t acked = 0;
};

// A replacement takes its shard back while both workers keep pushing: the requests waiting at
// the server that steps down are sent again to the new primary, and neither server loses an
// acknowledged push: each can die right after the hand-back and the job goes on.
TEST_F(HandBack, WhileTrainingGoesOnNoPushIsLost) {
  ASSERT_NO_FATAL_FAILURE(train_and_lose_server_1(4));
  // Training goes on through the replacement's copy and the hand-back, and some clocks after.
  std::atomic<int64_t> until{1 << 20}, clock{4};
  std::vector<float> last;
  std::thread trainer([&] {
    for (int64_t c = clock; c < until; c = ++clock) last = train(w0, w1, c, c + 1, expect, &acked);
  });
  cluster.replace(1);
  const bool handed = cluster.wait_view([&](const View& v) { return v.shards == first.shards; });
  until = clock + 10;
  trainer.join();
  ASSERT_TRUE(handed);
  for (size_t i = 0; i < expect.size(); ++i) ASSERT_NEAR(last[i], expect[i], 1e-3) << i;
  bool event = false;
  for (const auto& e : cluster.events()) {
    event |= e.value("event", "") == "ps_hand_back" && e.value("shard", -1) == 1 &&
             e.value("from", -1) == 2 && e.value("to", -1) == 1;
  }
  EXPECT_TRUE(event);

  // The replacement dies at once: server 2, which stepped down, still holds shard 1.
  cluster.kill(1);
  ASSERT_TRUE(cluster.wait_view([](const View& v) { return v.shards[1].primary == 2; }));
  const int64_t end = clock + 4;
  last = train(w0, w1, clock, end, expect, &acked);
  for (size_t i = 0; i < expect.size(); ++i) ASSERT_NEAR(last[i], expect[i], 1e-3) << i;
  EXPECT_FALSE(cluster.failure().has_value()) << *cluster.failure();
  for (const ShardStatus& st : w0.status()) {
    EXPECT_EQ(st.applied, acked);
    EXPECT_EQ(st.version, end);
  }
}

// A pull waiting at the server that hands its shard back, for a push that will go to the new
// primary, is sent on there rather than left waiting for it.
TEST_F(HandBack, TheServerSteppingDownSendsItsWaitingPullsOn) {
  ASSERT_NO_FATAL_FAILURE(train_and_lose_server_1(2));

  // Worker 0 pushes clock 2 and asks for the parameters after both workers' clock 2; it waits
  // at server 2 (shard 1's primary for now) once its push is applied there.
  const size_t n = layout.total();
  const auto keys = w0.all_keys();
  const auto g0 = gradient(0, 2, n), g1 = gradient(1, 2, n);
  std::vector<float> p0(n), p1(n);
  auto a = w0.push_pull(keys, g0, p0, {.clock = 2, .lr = 0.1, .min_version = 3});
  const Deadline d = Deadline::after(Millis(5000));
  while (w1.status()[1].applied < acked + 1 && !d.expired()) {
    std::this_thread::sleep_for(Millis(5));
  }
  ASSERT_EQ(w1.status()[1].applied, acked + 1);

  // The replacement takes shard 1 back; worker 1's push of clock 2 goes to it.
  cluster.replace(1);
  ASSERT_TRUE(cluster.wait_view([&](const View& v) { return v.shards == first.shards; }));
  w1.push_pull(keys, g1, p1, {.clock = 2, .lr = 0.1, .min_version = 2})->wait(Millis(5000));
  ASSERT_NO_THROW(a->wait(Millis(5000)));
  for (size_t i = 0; i < n; ++i) expect[i] -= 0.1f * (g0[i] + g1[i]);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(p0[i], expect[i], 1e-4) << i;
  for (const ShardStatus& st : w0.status()) EXPECT_EQ(st.applied, acked + 2);
}

double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// While one worker evaluates (a pause), another's answer is held at the server until it resumes,
// and the server waits for that without burning CPU, even when the held request's own read
// deadline (`wait`) passed long ago: a server that polled for it would starve the evaluation it
// waits for on a busy host.
TEST(ParameterServers, APausedServerHoldsAnswersWithoutSpinning) {
  PsCluster cluster(settings(1, 2, Consistency::Ssp));
  const Layout layout({16}, 1);
  Client w0(cluster.client_options(0), layout), w1(cluster.client_options(1), layout);
  w0.init(initial(16))->wait();
  std::vector<float> p0(16), p1(16);
  const auto keys = w0.all_keys();
  const auto g00 = gradient(0, 0, 16), g10 = gradient(1, 0, 16), g11 = gradient(1, 1, 16);
  w0.push_pull(keys, g00, p0, {.clock = 0, .lr = 0.1})->wait();
  w1.push_pull(keys, g10, p1, {.clock = 0, .lr = 0.1})->wait();

  // Slot 1 has no request at the server: the pause gives up waiting for it to be held after
  // 100 ms and is in place from then on. Slot 1's next request is then held.
  w0.pause(0, Millis(100))->wait(Millis(10000));
  PullInfo info;
  auto held = w1.push_pull(keys, g11, p1, {.clock = 1, .lr = 0.1, .wait = Millis(10)}, &info);
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < Millis(1000)) {
    EXPECT_FALSE(held->is_completed());
    std::this_thread::sleep_for(Millis(50));
  }
  const double cpu = process_cpu_seconds() - cpu0;
  w0.resume(0)->wait(Millis(10000));
  held->wait(Millis(10000));
  EXPECT_GE(info.held, std::chrono::microseconds(900000));
  EXPECT_LT(cpu, 0.3) << "CPU seconds spent by the whole test process while the answer was held";
}

// A pause lasts as long as the evaluation, which may be longer than a request's timeout (a
// large test set): the server says it holds the answer (kHeld) when the hold begins and every
// second after, and the held worker's request is not timed out meanwhile.
TEST(ParameterServers, AnAnswerHeldLongerThanTheRequestTimeoutIsNotTimedOut) {
  PsCluster cluster(settings(2, 2, Consistency::Ssp));
  const Layout layout({16}, 2);
  Client w0(cluster.client_options(0), layout), w1(cluster.client_options(1, Millis(1500)), layout);
  w0.init(initial(16))->wait();
  std::vector<float> p0(16), p1(16);
  const auto keys = w0.all_keys();
  w0.push_pull(keys, gradient(0, 0, 16), p0, {.clock = 0, .lr = 0.1})->wait();
  w1.push_pull(keys, gradient(1, 0, 16), p1, {.clock = 0, .lr = 0.1})->wait();

  w0.pause(0, Millis(100))->wait(Millis(10000));
  PullInfo info;
  const auto g11 = gradient(1, 1, 16);
  auto held = w1.push_pull(keys, g11, p1, {.clock = 1, .lr = 0.1}, &info);
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < Millis(4000)) {  // the evaluation: over twice w1's timeout
    ASSERT_FALSE(held->is_completed()) << "the held request ended after "
                                       << seconds_since(t0) << " s";
    std::this_thread::sleep_for(Millis(50));
  }
  w0.resume(0)->wait(Millis(10000));
  held->wait(Millis(10000));
  EXPECT_GE(info.held, std::chrono::microseconds(3900000));
}

// The job retires the slot of a worker it declared lost; a pause that worker held ends with it,
// so the others do not wait for an evaluation nobody will finish.
TEST(ParameterServers, APauseEndsWhenItsSlotIsRetired) {
  PsCluster cluster(settings(1, 2, Consistency::Ssp));
  const Layout layout({16}, 1);
  Client w0(cluster.client_options(0), layout), w1(cluster.client_options(1), layout);
  Client launcher(cluster.client_options(kNoSlot), layout);
  w0.init(initial(16))->wait();
  std::vector<float> p0(16), p1(16);
  const auto keys = w0.all_keys();
  w0.push_pull(keys, gradient(0, 0, 16), p0, {.clock = 0, .lr = 0.1})->wait();
  w1.push_pull(keys, gradient(1, 0, 16), p1, {.clock = 0, .lr = 0.1})->wait();

  // Slot 1 waits for slot 0's clock 1; slot 0 pauses, which completes once slot 1 waits at the
  // server. Slot 0 never pushes clock 1: the job declares it lost and retires its slot.
  PullInfo info;
  const auto g11 = gradient(1, 1, 16);
  auto held = w1.push_pull(keys, g11, p1, {.clock = 1, .lr = 0.1, .min_clock = 2}, &info);
  w0.pause(0, Millis(10000))->wait(Millis(10000));
  EXPECT_FALSE(held->is_completed());
  launcher.control(Control::kRetire, 0)->wait(Millis(10000));
  // Retired, slot 0's clocks no longer count, so clock 1 is complete; its answer was held by
  // slot 0's pause, which ended with the retirement.
  ASSERT_NO_THROW(held->wait(Millis(5000))) << "the pause of a retired slot still holds answers";
  EXPECT_TRUE(info.reached);
  EXPECT_GT(info.held.count(), 0);
}

TEST(ParameterServers, AStoppedServerIsFoundByItsSilenceAndTheJobGoesOn) {
  PsCluster cluster(settings(2, 1, Consistency::Async));
  const Layout layout({6}, 2);
  Client w(cluster.client_options(0, Millis(10000)), layout);
  w.init(initial(6))->wait();
  std::vector<float> out(6);
  w.push_pull(w.all_keys(), gradient(0, 0, 6), out, {.clock = 0, .lr = 1})->wait();
  cluster.silence(0);  // nobody tells the manager: only the heartbeats stop
  auto t0 = Clock::now();
  w.push_pull(w.all_keys(), gradient(0, 1, 6), out, {.clock = 1, .lr = 1})->wait();
  EXPECT_LT(Clock::now() - t0, Millis(5000));
  EXPECT_EQ(cluster.view().shards[0].primary, 1);
  bool lost = false;
  for (const auto& e : cluster.events()) {
    lost |= e.value("event", "") == "server_lost" &&
            e.value("cause", "").find("no heartbeat") != std::string::npos;
  }
  EXPECT_TRUE(lost);
}

TEST(ParameterServers, AShardWithoutACopyLeftIsLostAndTheManagerSaysWhich) {
  PsCluster cluster(settings(2, 1, Consistency::Async));
  const Layout layout({4}, 2);
  Client w(cluster.client_options(0), layout);
  w.init(initial(4))->wait();
  cluster.kill(0);
  ASSERT_TRUE(cluster.wait_view([](const View& v) { return v.shards[0].primary == 1; }));
  cluster.kill(1);
  const Deadline d = Deadline::after(Millis(5000));
  while (!cluster.failure() && !d.expired()) std::this_thread::sleep_for(Millis(5));
  ASSERT_TRUE(cluster.failure().has_value());
  EXPECT_NE(cluster.failure()->find("shard 0 is lost"), std::string::npos) << *cluster.failure();
}

TEST(ParameterServers, ErrorsNameTheServerTheShardAndTheClock) {
  PsCluster cluster(settings(2, 1, Consistency::Ssp));
  const Layout layout({4}, 2);
  Client w(cluster.client_options(0, Millis(2000)), layout);
  std::vector<float> out(4);
  // Nobody initialised the shards: the pull waits for it, then times out naming them.
  try {
    w.pull(w.all_keys(), out, {.clock = 3})->wait();
    FAIL() << "a pull of uninitialised shards succeeded";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("shard 0 at parameter server 0"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no parameters yet"), std::string::npos) << e.what();
  }
  w.init(initial(4))->wait();
  try {
    w.push(w.all_keys(), gradient(0, 0, 4), {.clock = 2, .lr = 1})->wait();
    FAIL() << "a push that skips clocks was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pushed clock 2 before clock 0"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("parameter server"), std::string::npos) << e.what();
  }
}

TEST(ParameterServers, StopIsSeenByEveryLaterPullAndCountsAddUp) {
  PsCluster cluster(settings(2, 2, Consistency::Async));
  const Layout layout({3, 3}, 2);
  Client w0(cluster.client_options(0), layout), w1(cluster.client_options(1), layout);
  w0.init(initial(6))->wait();
  std::vector<float> out(6);
  PullInfo info;
  w0.push_pull(w0.all_keys(), gradient(0, 0, 6), out,
               {.clock = 0, .lr = 1, .counts = {.epoch = 0, .samples = 3, .id_sum = 6}}, &info)
      ->wait();
  EXPECT_FALSE(info.stopped);
  w1.control(Control::kStop)->wait();
  w1.push_pull(w1.all_keys(), gradient(1, 0, 6), out,
               {.clock = 0, .lr = 1, .counts = {.epoch = 0, .samples = 2, .id_sum = 9}}, &info)
      ->wait();
  EXPECT_TRUE(info.stopped);
  const auto status = w0.status();
  ASSERT_EQ(status[0].counts.size(), 1u);
  EXPECT_EQ(status[0].counts[0].samples, 5.0);  // counted on shard 0 only
  EXPECT_EQ(status[0].counts[0].id_sum, 15.0);
  EXPECT_TRUE(status[1].counts.empty() || status[1].counts[0].samples == 0);
  EXPECT_EQ(status[1].slot_clocks, (std::vector<int64_t>{1, 1}));
}

class ServerWire : public ::testing::Test {
 protected:
  store::testing::LogCapture logs_;
};

TEST_F(ServerWire, GarbageTruncatedOversizedAndUnauthenticatedInputIsRefusedAndServingGoesOn) {
  ServerSettings s = settings(1, 1, Consistency::Async);
  s.max_message_bytes = 1 << 16;
  PsCluster cluster(s);
  const Layout layout({4}, 1);
  Client w(cluster.client_options(0), layout);
  w.init(initial(4))->wait();
  const net::Endpoint ep = net::Endpoint::parse(cluster.view().servers[0].address);
  using store::testing::frame_bytes;
  using store::testing::RawClient;
  struct Case {
    bool authenticate;
    std::vector<uint8_t> bytes;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {false, std::vector<uint8_t>(300, 0xab), "bad frame magic"},
      {true, frame_bytes(static_cast<uint16_t>(net::MsgType::kPsRequest), {}, 1u << 20),
       "exceeds the limit"},
      {true, frame_bytes(net::MsgType::kPsRequest, {2, 0, 0}), "truncated"},
      {true, frame_bytes(net::MsgType::kPsRequest, std::vector<uint8_t>(21, 0)),
       "unknown parameter-server request type 0"},
      {true, frame_bytes(net::MsgType::kStoreRequest, {1}), "expected a parameter-server request"},
      {false, frame_bytes(net::MsgType::kPsRequest, {2, 0, 0}), "expected a handshake hello"},
  };
  for (const Case& c : cases) {
    RawClient raw(ep);
    if (c.authenticate) raw.handshake(testing::kToken);
    raw.send(c.bytes);
    ASSERT_TRUE(raw.wait_closed(Millis(2000)).has_value()) << c.reason;
    ASSERT_TRUE(logs_.wait_for_warnings(c.reason, 1, Millis(2000))) << c.reason << "\n"
                                                                    << logs_.dump();
  }
  {
    // A truncated frame, then the connection goes.
    RawClient raw(ep);
    raw.handshake(testing::kToken);
    auto f = frame_bytes(net::MsgType::kPsRequest, std::vector<uint8_t>(64, 1));
    f.resize(30);
    raw.send(f);
    raw.shutdown_write();
    ASSERT_TRUE(raw.wait_closed(Millis(2000)).has_value());
    ASSERT_TRUE(logs_.wait_for_warnings("middle of a frame", 1, Millis(2000))) << logs_.dump();
  }
  {
    // A wrong token never reaches the shard.
    RawClient raw(ep);
    EXPECT_THROW(raw.handshake("not-the-token"), AuthError);
  }
  std::vector<float> out(4);
  w.push_pull(w.all_keys(), gradient(0, 0, 4), out, {.clock = 0, .lr = 1})->wait(Millis(2000));
  EXPECT_EQ(w.status()[0].applied, 1u);
}

// Well-formed requests the shard cannot serve (a slot the job does not have, ranges that name
// values twice) are answered with an error at once, before they wait on anything, and the shard
// goes on answering the workers.
TEST_F(ServerWire, RequestsForNoSuchSlotOrOverlappingRangesAreRefusedAndTheShardGoesOn) {
  PsCluster cluster(settings(1, 2, Consistency::Ssp));
  const Layout layout({4}, 1);
  Client w0(cluster.client_options(0), layout), w1(cluster.client_options(1), layout);
  w0.init(initial(4))->wait();
  const View view = cluster.view();
  store::testing::RawClient raw(net::Endpoint::parse(view.servers[0].address));
  raw.handshake(testing::kToken);
  struct Case {
    uint32_t slot;
    std::vector<Range> ranges;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {7, {{0, 4}}, "slot 7 asked, but the job has 2 workers"},
      {0, {{0, 4}, {0, 4}, {0, 4}}, "overlap"},
      {1, {{0, 3}, {2, 2}}, "overlap"},
  };
  uint64_t id = 1000;
  for (const Case& c : cases) {
    Request q{.op = Op::kPushPull,
              .shard = 0,
              .view = view.number,
              .id = ++id,
              .slot = c.slot,
              .pull = true,
              .wait_ms = 50,
              .ranges = c.ranges};
    raw.send(store::testing::frame_bytes(net::MsgType::kPsRequest, encode_request(q)));
    const Response r = decode_response(
        net::read_frame(raw.sock(), Deadline::after(Millis(2000)), 1 << 20).payload);
    EXPECT_EQ(r.id, id);
    EXPECT_EQ(r.status, Status::kError) << c.reason;
    EXPECT_NE(r.message.find(c.reason), std::string::npos) << r.message;
  }
  // Both workers' clock 0 is applied and answered.
  std::vector<float> out0(4), out1(4);
  const std::vector<float> g0 = gradient(0, 0, 4), g1 = gradient(1, 0, 4);  // read until done
  auto a = w0.push_pull(w0.all_keys(), g0, out0, {.clock = 0, .lr = 1});
  auto b = w1.push_pull(w1.all_keys(), g1, out1, {.clock = 0, .lr = 1});
  a->wait(Millis(3000));
  b->wait(Millis(3000));
  const ShardStatus status = w0.status()[0];
  EXPECT_EQ(status.applied, 2u);  // both pushes, as one step
  EXPECT_EQ(status.version, 1);
}

}  // namespace
}  // namespace cohort::ps
