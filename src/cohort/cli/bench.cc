#include <iostream>

#include "cohort/cli/commands.h"

namespace cohort::cli {

int bench_main(int, char**) {
  std::cerr << "cohort bench: not built yet\n";
  return 1;
}

}  // namespace cohort::cli
