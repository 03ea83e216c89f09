#include "cohort/base/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "cohort/base/error.h"

namespace cohort {

void write_file_atomically(const std::filesystem::path& path, const std::string& content,
                           mode_t mode) {
  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  ::unlink(tmp.c_str());  // O_CREAT keeps the mode of a file that is already there
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) throw SystemError("open " + tmp.string(), errno);
  auto fail = [&](const std::string& what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw SystemError(what + " " + tmp.string(), err);
  };
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw SystemError("close " + tmp.string(), err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw SystemError("rename " + tmp.string() + " to " + path.string(), err);
  }
  auto dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SystemError("cannot open " + path.string(), errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace cohort
