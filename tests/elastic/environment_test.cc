// init_from_environment: variables, their fallbacks and errors, and real process groups of three
// ranks (threads of this process, each with its own variables through EnvOptions) over loopback.
#include "cohort/elastic/environment.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/base/log.h"

namespace cohort::elastic {
namespace {

using namespace std::chrono_literals;

// A port nobody listens on right now.
uint16_t free_port() {
  auto l = net::Listener::bind("127.0.0.1", 0);
  return l.port();
}

EnvOptions vars(std::map<std::string, std::string> v) {
  return {.variables = std::move(v), .read_process_environment = false};
}

EnvOptions rank_vars(int rank, int world, uint16_t port, const std::string& timeout_s = "10") {
  return vars({{"COHORT_RANK", std::to_string(rank)},
               {"COHORT_WORLD_SIZE", std::to_string(world)},
               {"COHORT_MASTER_ADDR", "127.0.0.1:" + std::to_string(port)},
               {"COHORT_TOKEN", "secret"},
               {"COHORT_TIMEOUT_S", timeout_s}});
}

// The ConfigError message of read_environment(options); fails the test if it does not throw.
std::string config_error(const EnvOptions& options) {
  try {
    read_environment(options);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

TEST(ReadEnvironment, ReadsEveryVariable) {
  auto c = read_environment(vars({{"COHORT_RANK", "2"},
                                  {"COHORT_WORLD_SIZE", "3"},
                                  {"COHORT_MASTER_ADDR", "10.1.2.3:29500"},
                                  {"COHORT_TOKEN", "t"},
                                  {"COHORT_TIMEOUT_S", "2.5"},
                                  {"COHORT_BIND_HOST", "0.0.0.0"},
                                  {"COHORT_ADVERTISE_HOST", "10.1.2.4"}}));
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.world_size, 3);
  EXPECT_EQ(c.master.host, "10.1.2.3");
  EXPECT_EQ(c.master.port, 29500);
  EXPECT_EQ(c.token, "t");
  EXPECT_EQ(c.timeout, 2500ms);
  EXPECT_EQ(c.bind_host, "0.0.0.0");
  EXPECT_EQ(c.advertise_host, "10.1.2.4");
}

TEST(ReadEnvironment, DefaultsTimeoutAndHosts) {
  auto c = read_environment(vars({{"COHORT_RANK", "0"},
                                  {"COHORT_WORLD_SIZE", "1"},
                                  {"COHORT_MASTER_ADDR", "[::1]:1234"},
                                  {"COHORT_TOKEN", "t"}}));
  EXPECT_EQ(c.timeout, 30s);
  EXPECT_EQ(c.bind_host, "127.0.0.1");
  EXPECT_EQ(c.advertise_host, "");
  EXPECT_EQ(c.master.host, "::1");
}

TEST(ReadEnvironment, FallsBackToTheLaunchersVariablesInOrder) {
  std::map<std::string, std::string> common{{"COHORT_MASTER_ADDR", "127.0.0.1:1"},
                                            {"COHORT_TOKEN", "t"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(common.begin(), common.end());
    return read_environment(vars(extra));
  };
  auto ompi = with({{"OMPI_COMM_WORLD_RANK", "1"},
                    {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"PMI_RANK", "3"},
                    {"PMI_SIZE", "5"}});
  EXPECT_EQ(ompi.rank, 1);
  EXPECT_EQ(ompi.world_size, 4);
  auto pmi =
      with({{"PMI_RANK", "3"}, {"PMI_SIZE", "5"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(pmi.rank, 3);
  EXPECT_EQ(pmi.world_size, 5);
  auto slurm = with({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "7"}});
  EXPECT_EQ(slurm.rank, 6);
  EXPECT_EQ(slurm.world_size, 7);
  // COHORT_* wins over every launcher's variable.
  auto own = with({{"COHORT_RANK", "0"},
                   {"COHORT_WORLD_SIZE", "2"},
                   {"SLURM_PROCID", "6"},
                   {"SLURM_NTASKS", "7"}});
  EXPECT_EQ(own.rank, 0);
  EXPECT_EQ(own.world_size, 2);
}

TEST(ReadEnvironment, MissingVariablesAreNamed) {
  auto e = config_error(
      vars({{"COHORT_WORLD_SIZE", "2"}, {"COHORT_MASTER_ADDR", "h:1"}, {"COHORT_TOKEN", "t"}}));
  EXPECT_NE(e.find("COHORT_RANK is not set"), std::string::npos) << e;
  EXPECT_NE(e.find("OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID"), std::string::npos) << e;

  e = config_error(
      vars({{"COHORT_RANK", "0"}, {"COHORT_MASTER_ADDR", "h:1"}, {"COHORT_TOKEN", "t"}}));
  EXPECT_NE(e.find("COHORT_WORLD_SIZE is not set"), std::string::npos) << e;

  e = config_error(
      vars({{"COHORT_RANK", "0"}, {"COHORT_WORLD_SIZE", "2"}, {"COHORT_MASTER_ADDR", "h:1"}}));
  EXPECT_NE(e.find("COHORT_TOKEN is not set"), std::string::npos) << e;

  e = config_error(vars({{"COHORT_RANK", "0"},
                         {"COHORT_WORLD_SIZE", "2"},
                         {"COHORT_TOKEN", "t"},
                         {"COHORT_MASTER_ADDR", ""}}));
  EXPECT_NE(e.find("COHORT_MASTER_ADDR is not set"), std::string::npos) << e;
}

TEST(ReadEnvironment, InvalidValuesNameTheVariableAndTheValue) {
  auto with = [](const std::string& name, const std::string& value) {
    std::map<std::string, std::string> v{{"COHORT_RANK", "1"},
                                         {"COHORT_WORLD_SIZE", "2"},
                                         {"COHORT_MASTER_ADDR", "127.0.0.1:29500"},
                                         {"COHORT_TOKEN", "t"}};
    v[name] = value;
    return config_error(vars(v));
  };
  struct Case {
    std::string name, value, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"COHORT_RANK", "one", "COHORT_RANK='one' is not a non-negative integer"},
           {"COHORT_RANK", "-1", "COHORT_RANK='-1' is not a non-negative integer"},
           {"COHORT_RANK", " 1", "COHORT_RANK=' 1' is not a non-negative integer"},
           {"COHORT_RANK", "2", "COHORT_RANK='2' is out of range for COHORT_WORLD_SIZE='2'"},
           {"COHORT_WORLD_SIZE", "0", "COHORT_WORLD_SIZE='0': a job needs at least one rank"},
           {"COHORT_WORLD_SIZE", "99999999999", "COHORT_WORLD_SIZE='99999999999' is not"},
           {"COHORT_MASTER_ADDR", "localhost", "COHORT_MASTER_ADDR: bad address 'localhost'"},
           {"COHORT_MASTER_ADDR", "h:70000", "COHORT_MASTER_ADDR: port out of range"},
           {"COHORT_MASTER_ADDR", "h:0", "COHORT_MASTER_ADDR='h:0' needs a port other than 0"},
           {"COHORT_TIMEOUT_S", "soon", "COHORT_TIMEOUT_S='soon' is not a positive number"},
           {"COHORT_TIMEOUT_S", "0", "COHORT_TIMEOUT_S='0' is not a positive number"},
           {"COHORT_TIMEOUT_S", "5s", "COHORT_TIMEOUT_S='5s' is not a positive number"},
           {"COHORT_TIMEOUT_S", "inf", "COHORT_TIMEOUT_S='inf' is not a positive number"},
       }) {
    auto e = with(c.name, c.value);
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.name << "=" << c.value << ": " << e;
  }
  // A fallback variable is named by its own name.
  auto e = config_error(vars({{"OMPI_COMM_WORLD_RANK", "x"},
                              {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"COHORT_MASTER_ADDR", "h:1"},
                              {"COHORT_TOKEN", "t"}}));
  EXPECT_NE(e.find("OMPI_COMM_WORLD_RANK='x'"), std::string::npos) << e;
}

TEST(ReadEnvironment, ReadsTheProcessEnvironment) {
  // ctest runs every test in its own process, so changing the environment here is contained.
  ::setenv("COHORT_RANK", "0", 1);
  ::setenv("COHORT_WORLD_SIZE", "3", 1);
  ::setenv("COHORT_MASTER_ADDR", "127.0.0.1:29999", 1);
  ::setenv("COHORT_TOKEN", "from-env", 1);
  ::setenv("COHORT_TIMEOUT_S", "7", 1);
  auto c = read_environment();
  EXPECT_EQ(c.world_size, 3);
  EXPECT_EQ(c.token, "from-env");
  EXPECT_EQ(c.timeout, 7s);
  // Explicit values take precedence over the environment.
  auto o = read_environment({.variables = {{"COHORT_RANK", "2"}}});
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.master.port, 29999);
  // Not reading the environment at all.
  EXPECT_THROW(read_environment({.read_process_environment = false}), ConfigError);
  for (auto v : {"COHORT_RANK", "COHORT_WORLD_SIZE", "COHORT_MASTER_ADDR", "COHORT_TOKEN",
                 "COHORT_TIMEOUT_S"}) {
    ::unsetenv(v);
  }
}

// Runs body(rank) for ranks 0..world-1 on threads; rethrows the first failure on this thread.
void run_ranks(int world, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

class ProcessGroupTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { log::init("environment_test"); }
};

TEST_F(ProcessGroupTest, ThreeRanksAllreduceWhateverOrderTheyStartIn) {
  const int world = 3;
  const uint16_t port = free_port();
  run_ranks(world, [&](int r) {
    // Rank 0 (the store's host) starts last: the others retry until it is up.
    if (r == 0) std::this_thread::sleep_for(300ms);
    ProcessGroup g = init_from_environment(rank_vars(r, world, port));
    EXPECT_EQ(g.rank(), r);
    EXPECT_EQ(g.size(), world);
    EXPECT_EQ(g.server != nullptr, r == 0);
    std::vector<double> v = {double(r + 1), 10.0 * r};
    g.comm->allreduce(Buffer{DType::F64, v.data(), v.size()})->wait();
    EXPECT_EQ(v[0], 6.0);
    EXPECT_EQ(v[1], 30.0);
    g.finish();
  });
}

TEST_F(ProcessGroupTest, RankZeroKeepsTheStoreUntilEveryRankIsDone) {
  const int world = 3;
  const uint16_t port = free_port();
  std::atomic<int> late_store_uses{0};
  std::atomic<bool> rank0_finishing{false}, rank0_finished{false};
  run_ranks(world, [&](int r) {
    ProcessGroup g = init_from_environment(rank_vars(r, world, port));
    g.comm->barrier()->wait();
    if (r == 0) {
      rank0_finishing = true;
      g.finish();  // must block until ranks 1 and 2 are done with the store
      rank0_finished = true;
      EXPECT_EQ(late_store_uses.load(), world - 1);
      return;  // the destructor stops the server
    }
    while (!rank0_finishing.load())
      std::this_thread::yield();  // rank 0 is on its way into finish()
    g.store->set("late/" + std::to_string(r), store::to_bytes("x"));  // the server is still up
    EXPECT_FALSE(rank0_finished.load());
    ++late_store_uses;
    // No explicit finish(): the destructor marks this rank done.
  });
}

TEST_F(ProcessGroupTest, RankZeroGivesUpOnARankThatNeverFinishesAndNamesIt) {
  const uint16_t port = free_port();
  run_ranks(2, [&](int r) {
    ProcessGroup g = init_from_environment(rank_vars(r, 2, port, "0.5"));
    g.comm->barrier()->wait();
    if (r == 0) {
      auto t0 = Clock::now();
      try {
        g.finish();
        ADD_FAILURE() << "finish() returned although rank 1 never finished";
      } catch (const TimeoutError& e) {
        EXPECT_NE(std::string(e.what()).find("comm/done/1"), std::string::npos) << e.what();
      }
      EXPECT_LT(Clock::now() - t0, 5s);
    } else {
      // Rank 1 outlives rank 0's wait without finishing, then leaves without marking itself done.
      std::this_thread::sleep_for(1500ms);
      g.comm.reset();
      g.store.reset();
    }
  });
}

TEST_F(ProcessGroupTest, ARankWithoutItsStoreServerTimesOut) {
  const uint16_t port = free_port();
  auto t0 = Clock::now();
  EXPECT_THROW(init_from_environment(rank_vars(1, 2, port, "0.5")), TimeoutError);
  EXPECT_LT(Clock::now() - t0, 5s);
}

TEST_F(ProcessGroupTest, RankZeroNamesTheAddressItCannotServe) {
  auto busy = net::Listener::bind("127.0.0.1", 0);  // the port is taken while this lives
  try {
    init_from_environment(rank_vars(0, 2, busy.port(), "0.5"));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "COHORT_MASTER_ADDR='127.0.0.1:" + std::to_string(busy.port()) + "'"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ProcessGroupTest, AWrongTokenIsRefused) {
  const uint16_t port = free_port();
  run_ranks(2, [&](int r) {
    auto o = rank_vars(r, 2, port, "1");
    if (r == 1) {
      o.variables["COHORT_TOKEN"] = "wrong";
      EXPECT_THROW(init_from_environment(o), AuthError);
    } else {
      EXPECT_THROW(init_from_environment(o), TimeoutError);  // rank 1 never joins
    }
  });
}

}  // namespace
}  // namespace cohort::elastic
