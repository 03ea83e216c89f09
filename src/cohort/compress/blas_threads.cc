#include "cohort/compress/blas_threads.h"

#include <cblas.h>

#include <string>

#include "cohort/base/error.h"

namespace cohort::compress {

void set_blas_threads(int threads) {
  if (threads < 1) {
    throw ConfigError("BLAS threads: " + std::to_string(threads) + " (at least 1)");
  }
  openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace cohort::compress
