// File-store specifics: file names, errors, and atomicity across processes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "choir/store.h"
#include "store/file_store_names.h"
#include "store/store_test_util.h"

namespace choir {
namespace {

using store::FileNameForKey;
using store::testing::TempDir;

TEST(FileStoreNamesTest, NamesAreSafeAndDistinct) {
  std::vector<std::string> keys = {"",
                                   ".",
                                   "..",
                                   "/",
                                   "a/b",
                                   "a%2Fb",
                                   "a.b",
                                   "a_b",
                                   "a-b",
                                   "A",
                                   "a",
                                   "k.",
                                   "h.",
                                   ".lock",
                                   ".tmp.123456",
                                   std::string("\0", 1),
                                   std::string(200, 'z'),
                                   std::string(4096, '/'),
                                   std::string(4096, 'a'),
                                   std::string(4095, 'a') + "b"};
  for (int i = 0; i < 256; ++i) keys.push_back(std::string(1, static_cast<char>(i)));
  std::set<std::string> names;
  for (const std::string& key : keys) {
    const std::string name = FileNameForKey(key);
    EXPECT_LE(name.size(), store::kMaxFileNameBytes);
    EXPECT_EQ(name.find('/'), std::string::npos) << name;
    EXPECT_EQ(name.find('\0'), std::string::npos);
    EXPECT_TRUE(name.rfind("k.", 0) == 0 || name.rfind("h.", 0) == 0) << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), std::set<std::string>(keys.begin(), keys.end()).size());
  EXPECT_EQ(FileNameForKey("rank/0"), "k.rank%2F0");
}

TEST(FileStoreTest, CreatesMissingDirectories) {
  TempDir tmp;
  auto store = NewFileStore(tmp.path() + "/a/b/c");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  std::ifstream in(tmp.path() + "/a/b/c/k.k");
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "v");
}

TEST(FileStoreTest, UnusableDirectoryIsStoreIoNamingThePath) {
  TempDir tmp;
  const std::string file = tmp.path() + "/plain_file";
  std::ofstream(file) << "x";
  auto store = NewFileStore(file + "/sub");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kStoreIo);
  EXPECT_NE(store.status().message().find(file), std::string::npos) << store.status().message();
  EXPECT_EQ(NewFileStore("").status().code(), Code::kInvalidArgument);
}

TEST(FileStoreTest, TwoStoresOnOneDirectoryShareKeys) {
  TempDir tmp;
  auto a = NewFileStore(tmp.path());
  auto b = NewFileStore(tmp.path());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Set("shared", "1").ok());
  EXPECT_EQ((*b)->Get("shared").value(), "1");
  EXPECT_TRUE((*b)->Delete("shared").value());
  EXPECT_FALSE((*a)->Check({"shared"}).value());
}

TEST(FileStoreTest, AddIsAtomicAcrossProcesses) {
  TempDir tmp;
  constexpr int kProcesses = 4;
  constexpr int kAdds = 50;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: only its own store, then _exit (no gtest teardown in the child).
      auto store = NewFileStore(tmp.path());
      if (!store.ok()) _exit(2);
      for (int i = 0; i < kAdds; ++i) {
        if (!(*store)->Add("counter", 1).ok()) _exit(3);
      }
      if (!(*store)->Set("done" + std::to_string(p), "1").ok()) _exit(4);
      _exit(0);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  auto store = NewFileStore(tmp.path());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Get("counter").value(), std::to_string(kProcesses * kAdds));
  EXPECT_TRUE(
      (*store)->Wait({"done0", "done1", "done2", "done3"}, std::chrono::milliseconds(0)).ok());
}

}  // namespace
}  // namespace choir
