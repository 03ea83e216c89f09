// The membership protocol over a real coordinator (store server on loopback): heartbeats that stop,
// survivors blocked in a collective released by the abort request, a new epoch with a new
// communicator, joiners admitted, exclusion of a late member, and giving up below min_workers.
// Workers are threads of this process with their own store connections and communicators.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/elastic/agent.h"
#include "cohort/elastic/coordinator.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/store/tcp_store.h"

namespace cohort::elastic {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::string kToken = "membership-test-token";

CoordinatorOptions options(int world, int min_workers, Millis failure_timeout = 1000ms,
                           Millis join_timeout = 5000ms) {
  return {.token = kToken,
          .world_size = world,
          .membership = {.min_workers = min_workers,
                         .max_workers = world,
                         .failure_timeout = failure_timeout,
                         .join_timeout = join_timeout}};
}

// Ticks the coordinator until `done(events so far)` or the deadline; returns every event.
std::vector<json> tick_until(Coordinator& c,
                             const std::function<bool(const std::vector<json>&)>& done,
                             Millis limit = 10000ms) {
  std::vector<json> all;
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    for (auto& e : c.tick()) all.push_back(e);
    if (done(all)) return all;
    std::this_thread::sleep_for(20ms);
  }
  ADD_FAILURE() << "condition not reached; events so far: " << json(all).dump();
  return all;
}

bool has_event(const std::vector<json>& events, const std::string& name) {
  for (const auto& e : events) {
    if (e.value("event", "") == name) return true;
  }
  return false;
}

const json* find_event(const std::vector<json>& events, const std::string& name) {
  for (const auto& e : events) {
    if (e.value("event", "") == name) return &e;
  }
  return nullptr;
}

// Ticks the coordinator on a thread of its own until stopped, keeping every event.
class Ticking {
 public:
  explicit Ticking(Coordinator& c)
      : thread_([this, &c] {
          while (!stop_) {
            auto ev = c.tick();
            {
              std::lock_guard lk(mu_);
              events_.insert(events_.end(), ev.begin(), ev.end());
            }
            std::this_thread::sleep_for(20ms);
          }
        }) {}
  ~Ticking() { stop(); }
  // Stops ticking; the events from then on are final.
  std::vector<json> stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    std::lock_guard lk(mu_);
    return events_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<json> events_;
  std::thread thread_;  // last: it starts once the rest is built
};

TEST(Coordinator, SilentWorkerIsLostAndSurvivorsFormTheNextEpoch) {
  Coordinator c(options(3, 2));
  store::TcpStore s(c.endpoint(), kToken);
  for (int r = 0; r < 3; ++r) {
    s.set(keys::joined(r),
          store::to_bytes(json{{"host", "h" + std::to_string(r)}, {"pid", 100 + r}}.dump()));
  }
  // Ranks 0 and 2 keep beating; rank 1 falls silent.
  std::atomic<bool> stop{false};
  std::thread beats([&] {
    store::TcpStore b(c.endpoint(), kToken);
    while (!stop) {
      b.add(keys::heartbeat(0), 1);
      b.add(keys::heartbeat(2), 1);
      std::this_thread::sleep_for(100ms);
    }
  });
  auto t0 = Clock::now();
  auto events =
      tick_until(c, [](auto& ev) { return has_event(ev, "membership_change_requested"); });
  const json* lost = find_event(events, "worker_lost");
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ((*lost)["rank"], 1);
  EXPECT_EQ((*lost)["host"], "h1");
  EXPECT_EQ((*lost)["pid"], 101);
  EXPECT_NE((*lost)["cause"].get<std::string>().find("heartbeat missed"), std::string::npos);
  EXPECT_GE(Clock::now() - t0, 1000ms);
  EXPECT_EQ(store::to_string(s.get(keys::request(1))), "abort");
  EXPECT_EQ(c.take_lost(), std::vector<int>{1});

  // The survivors report ready; the epoch is published without rank 1.
  s.set(keys::ready(1, 0), store::to_bytes("{}"));
  s.set(keys::ready(1, 2), store::to_bytes("{}"));
  events = tick_until(c, [](auto& ev) { return has_event(ev, "membership_changed"); });
  auto m = Membership::parse(store::to_string(s.get(keys::membership(1))));
  EXPECT_EQ(m.members, (std::vector<int>{0, 2}));
  EXPECT_EQ(m.rank_of(2), 1);
  EXPECT_EQ(c.epoch(), 1);

  // The first step of epoch 1 completes: a recovery is counted.
  s.set(keys::recovered(1),
        store::to_bytes(json{{"restored_step", 40}, {"steps_rolled_back", 3}}.dump()));
  events = tick_until(c, [](auto& ev) { return has_event(ev, "recovered"); });
  EXPECT_EQ(c.recovery_stats().recoveries, 1);
  EXPECT_EQ(c.recovery_stats().steps_rolled_back, 3);
  EXPECT_GT(c.recovery_stats().recovery_seconds_max, 0.0);
  stop = true;
  beats.join();
}

TEST(Coordinator, BelowMinWorkersWithoutJoinersGivesUpAtOnceNamingTheLimit) {
  Coordinator c(options(2, 2));
  store::TcpStore s(c.endpoint(), kToken);
  c.expect_joiners(false);
  c.worker_exited(1, false, "killed by signal 9 (SIGKILL)");
  s.set(keys::ready(1, 0), store::to_bytes("{}"));
  auto events = tick_until(c, [](auto& ev) { return has_event(ev, "job_abandoned"); });
  const json* lost = find_event(events, "worker_lost");
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ((*lost)["cause"], "killed by signal 9 (SIGKILL)");
  ASSERT_TRUE(c.abandoned());
  EXPECT_NE(c.abandoned()->find("elastic.min_workers = 2"), std::string::npos) << *c.abandoned();
  EXPECT_EQ(store::to_string(s.get(keys::kAbandoned)), *c.abandoned());
}

TEST(Coordinator, BelowMinWorkersWaitsForAJoinerThenAdmitsIt) {
  Coordinator c(options(2, 2, 1000ms, 10000ms));
  store::TcpStore s(c.endpoint(), kToken);
  c.worker_started(2, 1234);
  c.worker_exited(1, false, "exited with code 1");
  s.set(keys::ready(1, 0), store::to_bytes("{}"));
  auto events = tick_until(c, [](auto& ev) { return has_event(ev, "waiting_for_workers"); });
  EXPECT_FALSE(c.abandoned());
  s.set(keys::waiting(2), store::to_bytes("{}"));
  events = tick_until(c, [](auto& ev) { return has_event(ev, "membership_changed"); });
  auto m = Membership::parse(store::to_string(s.get(keys::membership(1))));
  EXPECT_EQ(m.members, (std::vector<int>{0, 2}));
}

TEST(Coordinator, SurvivorThatNeverLeavesTheEpochIsLostAfterTheFailureTimeout) {
  Coordinator c(options(3, 1, 500ms));
  store::TcpStore s(c.endpoint(), kToken);
  c.worker_exited(2, false, "killed by signal 9 (SIGKILL)");
  s.set(keys::ready(1, 0), store::to_bytes("{}"));  // rank 1 never answers
  auto events = tick_until(c, [](auto& ev) { return has_event(ev, "membership_changed"); });
  int lost = 0;
  for (const auto& e : events) {
    if (e.value("event", "") == "worker_lost" && e["rank"] == 1) {
      ++lost;
      EXPECT_NE(e["cause"].get<std::string>().find("did not leave membership epoch 0"),
                std::string::npos);
    }
  }
  EXPECT_EQ(lost, 1);
  EXPECT_EQ(c.members(), std::vector<int>{0});
}

// Full round over real communicators: three agents allreduce; rank 2 vanishes while the others are
// blocked in a collective; the abort request releases them long before the collective's deadline;
// they meet in epoch 1 and allreduce as a world of two; rank 2, back late, is excluded.
TEST(WorkerAgent, AbortRequestReleasesBlockedSurvivorsWhoMeetInTheNextEpoch) {
  Coordinator c(options(3, 2, 1000ms));
  Ticking ticking(c);
  auto make_agent = [&](store::Store& s, int rank) {
    return std::make_unique<WorkerAgent>(
        s, AgentOptions{.store = c.endpoint().str(),
                        .token = kToken,
                        .rank = rank,
                        .heartbeat = 100ms,
                        .join_timeout = 10000ms,
                        .comm = {.token = kToken, .timeout = 20000ms}});
  };
  auto survivor = [&](int rank) {
    store::TcpStore s(c.endpoint(), kToken);
    auto agent = make_agent(s, rank);
    Membership m = agent->join();
    EXPECT_EQ(m.epoch, 0);
    comm::Communicator& comm = agent->connect(m);
    double x = 1;
    comm.allreduce(Buffer{DType::F64, &x, 1}, {.op = comm::ReduceOp::Sum})->wait();
    EXPECT_EQ(x, 3);
    // Rank 2 never joins this one: blocked until the abort request (AbortedError, or PeerLostError
    // when the other survivor aborted first and closed its connections).
    auto t0 = Clock::now();
    EXPECT_THROW(comm.allreduce(Buffer{DType::F64, &x, 1}, {.op = comm::ReduceOp::Sum})->wait(),
                 Error);
    auto blocked = Clock::now() - t0;
    EXPECT_LT(blocked, 10000ms) << "released by the collective deadline, not the abort request";
    agent->disconnect("test: epoch failed");
    m = agent->rejoin(m, {{"step", 1}});
    EXPECT_EQ(m.epoch, 1);
    EXPECT_EQ(m.members, (std::vector<int>{0, 1}));
    comm::Communicator& next = agent->connect(m);
    EXPECT_EQ(next.size(), 2);
    x = rank + 1;
    next.allreduce(Buffer{DType::F64, &x, 1}, {.op = comm::ReduceOp::Sum})->wait();
    EXPECT_EQ(x, 3);
  };
  std::thread t0([&] { survivor(0); });
  std::thread t1([&] { survivor(1); });
  // Rank 2 is like a stopped process: its connections stay open, but it sends no heartbeat and
  // takes part in no collective after the first.
  store::TcpStore s2(c.endpoint(), kToken);
  s2.set(keys::joined(2), store::to_bytes(json{{"host", "h2"}, {"pid", 2}}.dump()));
  auto comm2 = comm::Communicator::create(s2, {.rank = 2,
                                               .size = 3,
                                               .token = kToken,
                                               .timeout = 20000ms,
                                               .store_prefix = keys::comm_prefix(0)});
  double x = 1;
  comm2->allreduce(Buffer{DType::F64, &x, 1}, {.op = comm::ReduceOp::Sum})->wait();
  t0.join();
  t1.join();
  comm2.reset();
  // Back late: the job went on without rank 2.
  store::TcpStore s(c.endpoint(), kToken);
  {
    auto agent = make_agent(s, 2);
    EXPECT_THROW(agent->rejoin(Membership{.epoch = 0, .members = {0, 1, 2}}, {{"step", 1}}),
                 ExcludedError);
  }
  const std::vector<json> events = ticking.stop();
  const json* lost = find_event(events, "worker_lost");
  ASSERT_NE(lost, nullptr) << json(events).dump();
  EXPECT_EQ((*lost)["rank"], 2);
  EXPECT_NE((*lost)["cause"].get<std::string>().find("heartbeat missed"), std::string::npos);
}

// A member lost before it connected (killed right after it joined): the others, waiting for it in
// the communicator's setup, give the setup up at the abort request instead of at the setup's
// deadline, leave in time and meet in the next epoch; none of them is declared lost.
TEST(WorkerAgent, AnAbortRequestAlsoReleasesSurvivorsStillSettingUpTheirCommunicator) {
  Coordinator c(options(3, 2, 1000ms));
  Ticking ticking(c);
  auto survivor = [&](int rank) {
    try {
      store::TcpStore s(c.endpoint(), kToken);
      WorkerAgent agent(s, AgentOptions{.store = c.endpoint().str(),
                                        .token = kToken,
                                        .rank = rank,
                                        .heartbeat = 100ms,
                                        .join_timeout = 10000ms,
                                        .comm = {.token = kToken, .timeout = 20000ms}});
      Membership m = agent.join();
      EXPECT_EQ(m.epoch, 0);
      const auto t0 = Clock::now();
      try {
        agent.connect(m);
        ADD_FAILURE() << "rank " << rank << " set up a communicator with a member that never came";
      } catch (const AbortedError& e) {
        EXPECT_NE(std::string(e.what()).find("setup"), std::string::npos) << e.what();
      }
      EXPECT_LT(Clock::now() - t0, 8000ms) << "released by the setup's deadline, not the request";
      agent.disconnect("test: setup given up");
      m = agent.rejoin(m, {{"step", 0}});
      EXPECT_EQ(m.epoch, 1);
      EXPECT_EQ(m.members, (std::vector<int>{0, 1}));
      comm::Communicator& next = agent.connect(m);
      double x = rank + 1;
      next.allreduce(Buffer{DType::F64, &x, 1}, {.op = comm::ReduceOp::Sum})->wait();
      EXPECT_EQ(x, 3);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << rank << ": " << e.what();
    }
  };
  // Rank 2 joins, then is gone: no heartbeat, no connection.
  store::TcpStore s2(c.endpoint(), kToken);
  s2.set(keys::joined(2), store::to_bytes(json{{"host", "h2"}, {"pid", 2}}.dump()));
  std::thread t0([&] { survivor(0); });
  std::thread t1([&] { survivor(1); });
  t0.join();
  t1.join();
  const std::vector<json> events = ticking.stop();
  std::vector<int> lost;
  for (const auto& e : events) {
    if (e.value("event", "") == "worker_lost") lost.push_back(e["rank"].get<int>());
  }
  EXPECT_EQ(lost, (std::vector<int>{2})) << json(events).dump();
}

// A joiner waits to be admitted as long as the members take to reach their next commit, even
// past its own join_timeout: it is admitted then, not failed (which would end the job).
TEST(WorkerAgent, AJoinerWaitsForTheMembersNextCommitHoweverLongItTakes) {
  CoordinatorOptions o = options(2, 1, 1000ms);
  o.membership.max_workers = 3;
  Coordinator c(o);
  c.worker_started(2, 1234);  // a replacement the launcher started
  Ticking ticking(c);
  auto agent_options = [&](int rank) {
    return AgentOptions{.store = c.endpoint().str(),
                        .token = kToken,
                        .rank = rank,
                        .heartbeat = 100ms,
                        .join_timeout = 300ms,
                        .comm = {.token = kToken, .timeout = 20000ms}};
  };
  std::atomic<int> seen_change{0};
  auto member = [&](int rank) {
    try {
      store::TcpStore s(c.endpoint(), kToken);
      WorkerAgent agent(s, agent_options(rank));
      Membership m = agent.join();
      EXPECT_EQ(m.epoch, 0);
      agent.connect(m);
      const auto until = Clock::now() + 10000ms;
      while (!agent.change_requested() && Clock::now() < until) std::this_thread::sleep_for(10ms);
      ASSERT_TRUE(agent.change_requested()) << "the joiner was never asked for";
      ++seen_change;
      // Steps that take longer than the joiner's join_timeout before the next commit.
      std::this_thread::sleep_for(1000ms);
      agent.disconnect("");
      m = agent.rejoin(m, {{"step", 20}});
      EXPECT_EQ(m.epoch, 1);
      comm::Communicator& next = agent.connect(m);
      double x = rank + 1;
      next.allreduce(Buffer{DType::F64, &x, 1}, {.op = comm::ReduceOp::Sum})->wait();
      EXPECT_EQ(x, 6);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << rank << ": " << e.what();
    }
  };
  std::thread t0([&] { member(0); });
  std::thread t1([&] { member(1); });
  try {
    store::TcpStore s(c.endpoint(), kToken);
    WorkerAgent joiner(s, agent_options(2));
    Membership m = joiner.join();
    EXPECT_EQ(seen_change.load(), 2);
    EXPECT_EQ(m.epoch, 1);
    EXPECT_EQ(m.members, (std::vector<int>{0, 1, 2}));
    comm::Communicator& comm = joiner.connect(m);
    double x = 3;
    comm.allreduce(Buffer{DType::F64, &x, 1}, {.op = comm::ReduceOp::Sum})->wait();
    EXPECT_EQ(x, 6);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the joiner: " << e.what();
  }
  t0.join();
  t1.join();
}

// A worker whose heartbeats cannot reach the coordinator (here: nothing listens where it sends
// them) for coordinator_wait fences itself: it is cut off, and rejoining throws ExcludedError.
// A worker whose heartbeats get through is not cut off over the same time.
TEST(WorkerAgent, WorkerWithoutACoordinatorForItsWaitFencesItself) {
  Coordinator c(options(1, 1, 1000ms));
  net::Endpoint nowhere{"127.0.0.1", 0};
  {
    auto l = net::Listener::bind("127.0.0.1", 0);
    nowhere.port = l.port();
  }  // closed: connections to it are refused
  store::TcpStore s(c.endpoint(), kToken);
  auto make_agent = [&](const net::Endpoint& heartbeats_to) {
    return std::make_unique<WorkerAgent>(s, AgentOptions{.store = heartbeats_to.str(),
                                                         .token = kToken,
                                                         .rank = 0,
                                                         .heartbeat = 50ms,
                                                         .join_timeout = 5000ms,
                                                         .coordinator_wait = 300ms});
  };
  Membership m = make_agent(c.endpoint())->join();
  {
    auto reachable = make_agent(c.endpoint());
    // Its heartbeats get through for longer than its coordinator_wait (8 of 50 ms): it stays in.
    const int64_t before = s.add(keys::heartbeat(0), 0);
    const auto t1 = Clock::now();
    while (s.add(keys::heartbeat(0), 0) < before + 8 && Clock::now() - t1 < 5000ms)
      std::this_thread::sleep_for(10ms);
    ASSERT_GE(s.add(keys::heartbeat(0), 0), before + 8) << "its heartbeats did not get through";
    EXPECT_FALSE(reachable->cut_off());
  }
  auto agent = make_agent(nowhere);
  auto t0 = Clock::now();
  while (!agent->cut_off() && Clock::now() - t0 < 10000ms) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(agent->cut_off()) << "not fenced 10 s after its heartbeats stopped getting through";
  EXPECT_GE(Clock::now() - t0, 300ms);
  try {
    agent->rejoin(m, {{"step", 1}});
    ADD_FAILURE() << "a cut-off worker rejoined";
  } catch (const ExcludedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: no heartbeat reached the coordinator"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(agent->join(), ExcludedError);
}

// A worker whose heartbeats did not get through while it was declared lost fences itself as soon
// as they get through again; one that was away as long but not declared lost trains on (what a
// coordinator started again over its journal sees). The store here is a StoreServer with a
// journal, stopped and started again on its port; the loss is written to the journal in between.
TEST(WorkerAgent, AWorkerDeclaredLostWhileAwayFencesItselfWhenItGetsThroughAgain) {
  const std::string journal = ::testing::TempDir() + "agent-away.journal";
  std::filesystem::remove(journal);
  auto server = std::make_unique<store::StoreServer>(
      store::StoreServerOptions{.token = kToken, .journal = journal});
  const net::Endpoint where = server->endpoint();
  {
    store::TcpStore setup(where, kToken);
    setup.set(keys::kEpoch, store::to_bytes("0"));
    setup.set(keys::membership(0), store::to_bytes(R"({"epoch": 0, "members": [0, 1]})"));
  }
  store::TcpStore s0(where, kToken), s1(where, kToken);
  auto make_agent = [&](store::Store& s, int rank) {
    return std::make_unique<WorkerAgent>(s, AgentOptions{.store = where.str(),
                                                         .token = kToken,
                                                         .rank = rank,
                                                         .heartbeat = 50ms,
                                                         .join_timeout = 5000ms,
                                                         .coordinator_wait = 60000ms});
  };
  auto lost = make_agent(s0, 0);
  auto kept = make_agent(s1, 1);
  lost->join();
  kept->join();
  server.reset();
  auto t0 = Clock::now();
  while (!(lost->coordinator_away() && kept->coordinator_away()) && Clock::now() - t0 < 5000ms)
    std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(lost->coordinator_away() && kept->coordinator_away());
  // Declared lost while away: written over the journal by a server the workers cannot reach (on
  // another port), so that it is there before either of them gets through again.
  int64_t beats = 0;
  {
    store::StoreServer elsewhere(store::StoreServerOptions{.token = kToken, .journal = journal});
    store::TcpStore w(elsewhere.endpoint(), kToken);
    w.set(keys::lost(0), store::to_bytes("heartbeat missed for 1000 ms"));
    beats = w.add(keys::heartbeat(1), 0);
  }
  server = std::make_unique<store::StoreServer>(store::StoreServerOptions{
      .bind_host = where.host, .port = where.port, .token = kToken, .journal = journal});
  store::TcpStore s(where, kToken);
  t0 = Clock::now();
  while (!lost->cut_off() && Clock::now() - t0 < 5000ms) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(lost->cut_off()) << "a worker declared lost while away went on";
  t0 = Clock::now();
  while (s.add(keys::heartbeat(1), 0) < beats + 5 && Clock::now() - t0 < 5000ms)
    std::this_thread::sleep_for(10ms);
  EXPECT_GE(s.add(keys::heartbeat(1), 0), beats + 5) << "the other's heartbeats did not resume";
  EXPECT_FALSE(kept->cut_off());
  EXPECT_FALSE(kept->coordinator_away());
  try {
    lost->rejoin({.epoch = 0, .members = {0, 1}}, {{"step", 1}});
    ADD_FAILURE() << "a worker declared lost rejoined";
  } catch (const ExcludedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 was declared lost while its heartbeats did not "
                                         "get through (heartbeat missed for 1000 ms)"),
              std::string::npos)
        << e.what();
  }
  lost.reset();
  kept.reset();
  server.reset();
  std::filesystem::remove(journal);
}

// A job that ended (job/ended): every worker still connected says it leaves (job/left/<rank>) and
// fences itself, naming the job's status.
TEST(WorkerAgent, AWorkerOfAJobThatEndedLeavesAndSaysSo) {
  Coordinator c(options(1, 1, 1000ms));
  store::TcpStore s(c.endpoint(), kToken);
  WorkerAgent agent(s, AgentOptions{.store = c.endpoint().str(),
                                    .token = kToken,
                                    .rank = 0,
                                    .heartbeat = 50ms,
                                    .join_timeout = 5000ms,
                                    .coordinator_wait = 60000ms});
  Membership m = agent.join();
  s.set(keys::kEnded, store::to_bytes("cancelled"));
  s.wait({keys::left(0)}, 5000ms);
  auto t0 = Clock::now();
  while (!agent.cut_off() && Clock::now() - t0 < 5000ms) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(agent.cut_off());
  try {
    agent.rejoin(m, {{"step", 1}});
    ADD_FAILURE() << "a worker of an ended job rejoined";
  } catch (const ExcludedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: the job ended (cancelled)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort::elastic
