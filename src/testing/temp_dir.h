// A temporary directory for tests, removed with its contents when the test
// ends, also when an assertion returns early (tests must not leave files
// behind on the machines that run them).
//
// Thread-safety: none needed (test fixtures).
#ifndef CHOIR_TESTING_TEMP_DIR_H_
#define CHOIR_TESTING_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace choir::testing {

class TempDir {
 public:
  // `prefix` names the directory under the system temp dir, so that a leftover
  // one (a test killed by a signal) tells which test made it.
  explicit TempDir(const std::string& prefix = "choir_test") {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Empty when the directory could not be made.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace choir::testing

#endif  // CHOIR_TESTING_TEMP_DIR_H_
