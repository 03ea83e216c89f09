// The embedded store's journal (store/journal.h) on any file: replaying it returns the keys or
// refuses with an Error naming the file, never crashes or hangs; what it returns, written as a
// journal afresh, replays to the same keys.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "cohort/base/error.h"
#include "cohort/store/journal.h"

namespace {

const std::string& scratch(const char* what) {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    return std::string(t && *t ? t : "/tmp");
  }();
  static std::string paths[2] = {
      dir + "/cohort-journal-fuzz-" + std::to_string(::getpid()) + ".in",
      dir + "/cohort-journal-fuzz-" + std::to_string(::getpid()) + ".out"};
  return paths[what[0] == 'o' ? 1 : 0];
}

}  // namespace

// A torn last record is logged; at the fuzzer's rate that would be most of its time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using cohort::store::StoreJournal;
  const std::string& in = scratch("in");
  if (FILE* f = std::fopen(in.c_str(), "wb")) {
    if (size) std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    return 0;
  }
  try {
    const auto kept = StoreJournal::replay(in);
    const std::string& out = scratch("out");
    { StoreJournal again(out, kept); }
    if (StoreJournal::replay(out) != kept) __builtin_trap();
    std::remove(out.c_str());
  } catch (const cohort::Error&) {
  }
  std::remove(in.c_str());
  return 0;
}
