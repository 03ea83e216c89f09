// The width of OpenBLAS's pool follows what a worker asks for, whatever the environment said
// when the library loaded.
#include "cohort/compress/blas_threads.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"

namespace cohort::compress {
namespace {

class BlasThreads : public ::testing::Test {
 protected:
  void TearDown() override { set_blas_threads(before_); }
  const int before_ = blas_threads();
};

TEST_F(BlasThreads, FollowWhatIsAsked) {
  set_blas_threads(1);
  EXPECT_EQ(blas_threads(), 1);
  set_blas_threads(2);
  EXPECT_EQ(blas_threads(), 2);
  set_blas_threads(1);
  EXPECT_EQ(blas_threads(), 1);
}

TEST_F(BlasThreads, FewerThanOneIsRefused) {
  set_blas_threads(1);
  EXPECT_THROW(set_blas_threads(0), ConfigError);
  EXPECT_THROW(set_blas_threads(-3), ConfigError);
  EXPECT_EQ(blas_threads(), 1);
}

}  // namespace
}  // namespace cohort::compress
