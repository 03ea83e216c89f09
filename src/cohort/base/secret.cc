#include "cohort/base/secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cohort/base/checksum.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"

namespace cohort {

std::string read_secret_file(const std::filesystem::path& path, const std::string& what,
                             size_t min_length) {
  const std::string name = what + " " + path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
  if (fd < 0) throw ConfigError(name + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw ConfigError(name + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ConfigError(name + ": not a regular file");
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw ConfigError(name + ": other users can read or change it (mode " + mode +
                      "); a token must be readable by its owner only: chmod 600 " + path.string());
  }
  std::string s;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw ConfigError(name + ": cannot read: " + std::strerror(err));
    }
    if (n == 0) break;
    s.append(buf, static_cast<size_t>(n));
    if (s.size() > (1u << 16)) {
      ::close(fd);
      throw ConfigError(name + ": larger than 64 KiB, not a token");
    }
  }
  ::close(fd);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  // It travels in HTTP headers and cookies and in environment variables: visible ASCII only.
  for (char c : s) {
    if (c <= ' ' || c > '~' || c == ';' || c == ',' || c == '"' || c == '\\') {
      throw ConfigError(name +
                        ": a token may hold only visible ASCII characters other than "
                        "; , \" and \\ (whitespace only at its end)");
    }
  }
  if (s.size() < min_length) {
    throw ConfigError(name + ": a token needs " + std::to_string(min_length) +
                      " characters or more");
  }
  return s;
}

void write_secret_file(const std::filesystem::path& path, const std::string& secret) {
  write_file_atomically(path, secret + "\n", 0600);
}

std::string random_token() {
  uint8_t raw[32];
  random_bytes(raw, sizeof(raw));
  return to_hex(raw, sizeof(raw));
}

bool secrets_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace cohort
