#include "cohort/comm/transport/host_identity.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>

namespace cohort::comm::transport {
namespace {

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id, hex;
  std::getline(in, id);
  for (char c : id) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) hex += c;
  }
  return hex.empty() ? "noboot" : hex;
}

std::string file_identity(const char* path) {
  struct stat st {};
  if (::stat(path, &st) != 0) return "0.0";
  char s[48];
  std::snprintf(s, sizeof(s), "%llx.%llx", static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  return s;
}

}  // namespace

const std::string& host_identity() {
  static const std::string id =
      boot_id() + "-" + file_identity("/proc/self/ns/net") + "-" + file_identity("/dev/shm");
  return id;
}

}  // namespace cohort::comm::transport
