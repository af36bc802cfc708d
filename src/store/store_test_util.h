// Helpers shared by the store tests: a temporary directory and a stopwatch.
//
// Thread-safety: none needed (test fixtures).
#ifndef CHOIR_STORE_STORE_TEST_UTIL_H_
#define CHOIR_STORE_STORE_TEST_UTIL_H_

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>

namespace choir::store::testing {

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string templ =
        (std::filesystem::temp_directory_path() / "choir_store_test.XXXXXX").string();
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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
