// The embedded store's journal: a server started again over it serves what its predecessor
// acknowledged, including a predecessor that was SIGKILLed; a torn last record is dropped, damage
// elsewhere is refused naming the file and the byte; the file stays bounded under overwrites.
#include "cohort/store/journal.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/store/tcp_store.h"
#include "store_test_env.h"

namespace cohort::store {
namespace {

namespace fs = std::filesystem;
using testing::kToken;

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cohort-journal-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "store.journal").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  StoreServerOptions options() const { return {.token = kToken, .journal = path_}; }

  fs::path dir_;
  std::string path_;
};

TEST_F(JournalTest, AServerStartedAgainServesWhatItsPredecessorHeld) {
  {
    StoreServer server(options());
    TcpStore s(server.endpoint(), kToken);
    s.set("a", to_bytes("1"));
    s.set("gone", to_bytes("x"));
    EXPECT_EQ(s.add("n", 5), 5);
    EXPECT_EQ(s.add("n", 2), 7);
    EXPECT_EQ(s.compare_set("c", {}, to_bytes("mine")), to_bytes("mine"));
    EXPECT_EQ(s.compare_set("c", to_bytes("other"), to_bytes("theirs")), to_bytes("mine"));
    EXPECT_TRUE(s.delete_key("gone"));
    s.set("a", to_bytes("2"));
  }
  StoreServer again(options());
  TcpStore s(again.endpoint(), kToken);
  EXPECT_EQ(to_string(s.get("a")), "2");
  EXPECT_EQ(s.add("n", 0), 7);
  EXPECT_EQ(to_string(s.get("c")), "mine");
  EXPECT_FALSE(s.check({"gone"}));
  // Without a journal the keys are the process's alone.
  StoreServer plain({.token = kToken});
  TcpStore p(plain.endpoint(), kToken);
  EXPECT_FALSE(p.check({"a"}));
}

// A journal that cannot grow (a full disk; here the file-size limit, which fails the write with
// EFBIG) is given up with an error: the store goes on answering, and the file keeps what it held.
TEST_F(JournalTest, AJournalThatCannotBeWrittenIsGivenUpAndTheStoreGoesOn) {
  StoreServer server(options());
  TcpStore s(server.endpoint(), kToken);
  s.set("a", to_bytes("1"));
  const auto before = fs::file_size(path_);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit cap = old;
  cap.rlim_cur = before;
  auto* const old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &cap), 0);
  s.set("b", to_bytes(std::string(4096, 'x')));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(to_string(s.get("b")), std::string(4096, 'x'));
  s.set("c", to_bytes("3"));
  EXPECT_EQ(to_string(s.get("c")), "3");
  // Out of the way of a coordinator started again over the run directory, which would replay
  // it without what was acknowledged since; kept beside it, not written after it was given up.
  EXPECT_FALSE(fs::exists(path_)) << "a coordinator started again would replay it";
  const fs::path abandoned = fs::path(path_).string() + ".abandoned";
  EXPECT_EQ(fs::file_size(abandoned), before) << "written after it was given up";
  const std::map<std::string, Bytes> kept = StoreJournal::replay(abandoned.string());
  EXPECT_EQ(kept.size(), 1u);
  EXPECT_EQ(to_string(kept.at("a")), "1");
}

// The server in a child process that is SIGKILLed after its answers: every change it answered is
// in the file (appended before the answer, one write each).
TEST_F(JournalTest, EveryAcknowledgedChangeOutlivesASigkilledServer) {
  int ports[2];
  ASSERT_EQ(::pipe(ports), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StoreServer server(options());
    const uint16_t port = server.port();
    [[maybe_unused]] auto n = ::write(ports[1], &port, sizeof(port));
    for (;;) ::pause();
  }
  uint16_t port = 0;
  ASSERT_EQ(::read(ports[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  {
    TcpStore s({"127.0.0.1", port}, kToken);
    for (int i = 0; i < 200; ++i) {
      std::string key = std::to_string(i);
      key.insert(key.begin(), 'k');
      s.set(key, to_bytes(std::to_string(i)));
    }
    EXPECT_EQ(s.add("beats", 200), 200);
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ports[0]);
  ::close(ports[1]);
  const auto kept = StoreJournal::replay(path_);
  ASSERT_EQ(kept.size(), 201u);
  EXPECT_EQ(to_string(kept.at("k199")), "199");
  EXPECT_EQ(to_string(kept.at("beats")), "200");
}

TEST_F(JournalTest, ATornLastRecordIsDroppedAndDamageElsewhereIsRefused) {
  {
    StoreJournal j(path_, {});
    j.put("first", to_bytes("one"));
    j.put("second", to_bytes("two"));
  }
  const std::string whole = read_file(path_);
  // The writer died inside its last write(): half a record.
  {
    std::ofstream f(path_, std::ios::app | std::ios::binary);
    f.write("\x20\x00\x00\x00\x01\x02", 6);
  }
  auto kept = StoreJournal::replay(path_);
  EXPECT_EQ(kept.size(), 2u);
  EXPECT_EQ(to_string(kept.at("second")), "two");
  // A flipped byte inside the first record: refused, naming the file and where.
  std::string damaged = whole;
  damaged[damaged.find("one")] = 'X';
  write_file_atomically(path_, damaged);
  try {
    StoreJournal::replay(path_);
    ADD_FAILURE() << "a damaged journal was read";
  } catch (const Error& e) {
    std::string want = path_;
    want.append(": the record at byte 23");
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  write_file_atomically(path_, "config: yaml\n");
  EXPECT_THROW(StoreJournal::replay(path_), Error);
  EXPECT_THROW(StoreServer{options()}, Error) << "a server started over a file that is not one";
  fs::remove(path_);
  EXPECT_TRUE(StoreJournal::replay(path_).empty());
}

// Heartbeats overwrite one key for as long as the job runs: the file is rewritten as the live keys
// whenever it doubles, so it stays a small multiple of them.
TEST_F(JournalTest, OverwritesKeepTheFileBounded) {
  StoreServer server(options());
  TcpStore s(server.endpoint(), kToken);
  const Bytes value(1000, 'v');
  s.set("big", Bytes(100 * 1000, 'b'));
  for (int i = 0; i < 5000; ++i) s.set("beat", value);  // 5 MB of records
  s.add("n", 1);
  EXPECT_LT(fs::file_size(path_), 2.5 * (1u << 20));
  const auto kept = StoreJournal::replay(path_);
  EXPECT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept.at("beat"), value);
}

}  // namespace
}  // namespace cohort::store
