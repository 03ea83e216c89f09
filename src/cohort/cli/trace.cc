// `cohort trace merge RUN_DIR`: one timeline for the whole job from the ranks' trace files.
#include <filesystem>
#include <iostream>

#include "cohort/cli/args.h"
#include "cohort/trace/tracer.h"

namespace cohort::cli {
namespace {

int usage(std::ostream& os, int code) {
  os << "usage: cohort trace merge RUN_DIR\n\n"
        "Merges RUN_DIR/trace/rank-N.json (written by a job with trace: {enabled: true}) into\n"
        "RUN_DIR/trace.json: one process per rank, every rank on rank 0's clock (offsets measured\n"
        "at rendezvous). Open it in https://ui.perfetto.dev or chrome://tracing.\n";
  return code;
}

}  // namespace

int trace_main(int argc, char** argv) {
  Args args(argc, argv, {}, {"help"});
  if (args.has("help")) return usage(std::cout, 0);
  const auto& pos = args.positionals();
  if (pos.size() != 2 || pos[0] != "merge") return usage(std::cerr, 2);
  int ranks = trace::merge_traces(pos[1]);
  std::cout << "cohort trace: merged " << ranks << " ranks into "
            << (std::filesystem::path(pos[1]) / "trace.json").string() << "\n";
  return 0;
}

}  // namespace cohort::cli
