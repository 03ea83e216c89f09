// Token files: only their owner may read them, they hold visible ASCII, and they are plain files.
#include "cohort/base/secret.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cohort/base/error.h"

namespace cohort {
namespace {

namespace fs = std::filesystem;

class SecretFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cohort-secret-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path file(const std::string& content, mode_t mode) {
    fs::path p = dir_ / "token";
    std::ofstream(p) << content;
    ::chmod(p.c_str(), mode);
    return p;
  }
  static std::string error_of(const fs::path& p) {
    try {
      read_secret_file(p, "--token-file");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(SecretFiles, AWrittenSecretIsTheOwnersAloneAndReadsBack) {
  const fs::path p = dir_ / "new.token";
  const std::string token = random_token();
  EXPECT_EQ(token.size(), 64u);
  write_secret_file(p, token);
  EXPECT_EQ(fs::status(p).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(read_secret_file(p, "--token-file"), token);
}

TEST_F(SecretFiles, AFileOthersCanReadOrChangeIsRefusedWithTheFix) {
  for (mode_t mode : {0644, 0640, 0604, 0620, 0602}) {
    const fs::path p = file("0123456789abcdef0123", mode);
    const std::string e = error_of(p);
    EXPECT_NE(e.find("--token-file " + p.string() + ": other users can read or change it"),
              std::string::npos)
        << std::oct << mode << ": " << e;
    EXPECT_NE(e.find("chmod 600 " + p.string()), std::string::npos) << e;
  }
  EXPECT_EQ(read_secret_file(file("0123456789abcdef0123\n\t ", 0600), "x"), "0123456789abcdef0123");
}

TEST_F(SecretFiles, ShortOddOrMissingTokensAreRefused) {
  EXPECT_NE(error_of(file("short", 0600)).find("a token needs 16 characters or more"),
            std::string::npos);
  EXPECT_NE(error_of(file("0123456789abcdef;path=/", 0600)).find("visible ASCII"),
            std::string::npos);
  EXPECT_NE(error_of(file("0123456789 abcdef0123", 0600)).find("visible ASCII"), std::string::npos);
  EXPECT_NE(error_of(dir_ / "missing").find("cannot open"), std::string::npos);
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of(fifo).find("not a regular file"), std::string::npos);  // and no hang
}

TEST(Secrets, CompareWholeStrings) {
  EXPECT_TRUE(secrets_equal("abc", "abc"));
  EXPECT_FALSE(secrets_equal("abc", "abd"));
  EXPECT_FALSE(secrets_equal("abc", "abcd"));
  EXPECT_FALSE(secrets_equal("", "a"));
}

}  // namespace
}  // namespace cohort
