#include "base/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "testing/temp_dir.h"

namespace choir::files {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// What a tool reads must be a regular file of bounded size: a directory, a
// FIFO (which would block) or a device such as /dev/zero (which never ends)
// is refused at once, naming what it is.
TEST(FilesTest, ReadsOnlyRegularFilesOfBoundedSize) {
  const choir::testing::TempDir dir("choir-files");
  const std::string file = dir.path() + "/a.txt", fifo = dir.path() + "/fifo";
  std::ofstream(file) << "hello";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto text = ReadSmallFile(file, 5);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "hello");
  EXPECT_EQ(ReadSmallFile(file, 4).status().message(), file + " holds more than the 4 B this reads");
  EXPECT_EQ(ReadSmallFile(dir.path(), 100).status().message(), dir.path() + " is a directory");
  EXPECT_EQ(ReadSmallFile(fifo, 100).status().message(), fifo + " is not a regular file");
  EXPECT_EQ(ReadSmallFile("/dev/zero", 100).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ReadSmallFile(dir.path() + "/none", 100).status().code(), Code::kSystemError);
}

// A replaced file is whole or untouched, keeps its permissions and its
// symbolic link; devices are written in place; nothing is left beside it.
TEST(FilesTest, ReplacesWholeFilesThroughLinksAndWritesDevicesInPlace) {
  const choir::testing::TempDir dir("choir-files");
  const std::string target = dir.path() + "/t.json", link = dir.path() + "/l.json";
  std::ofstream(target) << "old";
  ASSERT_EQ(chmod(target.c_str(), 0640), 0);
  std::filesystem::create_symlink(target, link);
  EXPECT_TRUE(CheckReplaceable(link).ok());
  ASSERT_TRUE(ReplaceFile(link, "new").ok());
  EXPECT_EQ(Slurp(target), "new");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  struct stat st {};
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 2);
  ASSERT_TRUE(ReplaceFile(dir.path() + "/fresh.json", "x").ok());
  EXPECT_EQ(Slurp(dir.path() + "/fresh.json"), "x");
  EXPECT_TRUE(ReplaceFile("/dev/null", "gone").ok());
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
  // A file the user made read-only stays as it is (root may write anything).
  if (geteuid() != 0) {
    ASSERT_EQ(chmod(target.c_str(), 0444), 0);
    EXPECT_EQ(ReplaceFile(target, "newer").code(), Code::kSystemError);
    EXPECT_EQ(Slurp(target), "new");
  }
  EXPECT_EQ(CheckReplaceable(dir.path()).message(), "is a directory");
  EXPECT_EQ(CheckReplaceable(dir.path() + "/no/such.json").message(), "directory " + dir.path() + "/no does not exist");
  // A failed write (the directory is gone) reports errno's text.
  const Status s = ReplaceFile(dir.path() + "/no/such.json", "x");
  EXPECT_EQ(s.code(), Code::kSystemError);
  EXPECT_NE(s.message().find("No such file or directory"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace choir::files
