// Helpers shared by the store tests: a temporary directory (testing/temp_dir.h)
// and a stopwatch.
//
// Thread-safety: none needed (test fixtures).
#ifndef CHOIR_STORE_STORE_TEST_UTIL_H_
#define CHOIR_STORE_STORE_TEST_UTIL_H_

#include <chrono>
#include <string>

#include "testing/temp_dir.h"

namespace choir::store::testing {

using choir::testing::TempDir;

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  std::chrono::milliseconds Elapsed() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start_);
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace choir::store::testing

#endif  // CHOIR_STORE_STORE_TEST_UTIL_H_
