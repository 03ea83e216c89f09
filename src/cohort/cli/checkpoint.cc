// `cohort checkpoint verify PATH...`: whether checkpoints are whole, before a resume needs them.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include "cohort/base/file.h"
#include "cohort/cli/args.h"
#include "cohort/train/checkpoint_format.h"

namespace cohort::cli {
namespace {

namespace fs = std::filesystem;

int usage(std::ostream& os, int code) {
  os << "usage: cohort checkpoint verify PATH...\n\n"
        "Checks every checkpoint named (a file, or a run's checkpoints/ directory: each\n"
        "ckpt-*.cohort in it) the way a resume does: header, lengths and SHA-256 of the contents.\n"
        "Prints one line per file; exits 1 if any is truncated or corrupt, 2 on bad usage.\n";
  return code;
}

// The files PATH names, in name order (= step order for a run's checkpoints).
std::vector<fs::path> checkpoints_in(const fs::path& path) {
  if (!fs::is_directory(path)) return {path};
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(path)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.starts_with("ckpt-") && name.ends_with(".cohort")) {
      out.push_back(entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int checkpoint_main(int argc, char** argv) {
  Args args(argc, argv, {}, {"help"});
  if (args.has("help")) return usage(std::cout, 0);
  const auto& pos = args.positionals();
  if (pos.size() < 2 || pos[0] != "verify") return usage(std::cerr, 2);
  int bad = 0, good = 0;
  for (size_t i = 1; i < pos.size(); ++i) {
    for (const fs::path& file : checkpoints_in(pos[i])) {
      try {
        const std::string bytes = read_file(file);
        const train::CheckpointMeta m = train::parse_checkpoint(bytes, file.string()).meta;
        std::printf("ok       %s: step %" PRId64 ", epoch %" PRId64 " (+%" PRId64
                    " samples), world size %" PRId64 ", job '%s'\n",
                    file.c_str(), m.step, m.epoch, m.consumed, m.world_size, m.job.c_str());
        ++good;
      } catch (const Error& e) {
        std::printf("CORRUPT  %s\n", e.what());
        ++bad;
      }
    }
  }
  std::printf("cohort checkpoint: %d verified, %d corrupt\n", good, bad);
  return bad ? 1 : 0;
}

}  // namespace cohort::cli
