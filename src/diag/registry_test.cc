#include "diag/registry.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "testing/temp_dir.h"

namespace choir::diag {
namespace {

TEST(RegistryTest, WriteScanAndStaleEntries) {
  const choir::testing::TempDir base("choir-registry");
  const std::string dir = base.path() + "/reg";
  RegistryEntry e;
  e.pid = static_cast<int>(getpid());
  e.start_time = ProcessStartTime(e.pid);
  EXPECT_GT(e.start_time, 0u);
  e.job = "j";
  e.rank = 3;
  e.size = 4;
  e.address = "127.0.0.1";
  e.port = 12345;
  auto path = WriteRegistryEntry(dir, e);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  // A child that has exited: its pid is dead.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  RegistryEntry dead = e;
  dead.pid = child;
  ASSERT_TRUE(WriteRegistryEntry(dir, dead).ok());
  // Our pid but another start time: the pid was reused.
  RegistryEntry reused = e;
  reused.pid = static_cast<int>(getppid());
  reused.start_time = ProcessStartTime(reused.pid) + 7;
  ASSERT_TRUE(WriteRegistryEntry(dir, reused).ok());
  std::ofstream(dir + "/garbage.json") << "{\"schema\": \"other\"}";
  const RegistryScan scan = ScanRegistry(dir);
  ASSERT_EQ(scan.alive.size(), 1u);
  EXPECT_EQ(scan.alive[0].rank, 3);
  EXPECT_EQ(scan.alive[0].port, 12345);
  EXPECT_EQ(scan.stale.size(), 2u);
  EXPECT_EQ(scan.unreadable.size(), 1u);
  EXPECT_TRUE(ScanRegistry(dir + "/missing").alive.empty());
}

// Anyone may write into a shared registry: a directory or a FIFO named
// *.json is listed as unreadable, never read (a FIFO would block the scan).
TEST(RegistryTest, DirectoriesAndFifosNamedJsonAreUnreadableNotFatal) {
  const choir::testing::TempDir base("choir-registry");
  ASSERT_EQ(mkdir((base.path() + "/x.json").c_str(), 0700), 0);
  ASSERT_EQ(mkfifo((base.path() + "/y.json").c_str(), 0600), 0);
  const RegistryScan scan = ScanRegistry(base.path());
  EXPECT_TRUE(scan.alive.empty());
  ASSERT_EQ(scan.unreadable.size(), 2u);
  EXPECT_NE(scan.unreadable[0].find("x.json is a directory"), std::string::npos) << scan.unreadable[0];
  EXPECT_NE(scan.unreadable[1].find("y.json is not a regular file"), std::string::npos) << scan.unreadable[1];
}

TEST(RegistryTest, ParseRejectsBadEntries) {
  EXPECT_FALSE(ParseRegistryEntry("").ok());
  EXPECT_FALSE(ParseRegistryEntry("[]").ok());
  EXPECT_FALSE(ParseRegistryEntry(R"({"schema":"choir.registry/1","pid":1})").ok());
  EXPECT_FALSE(
      ParseRegistryEntry(R"({"schema":"choir.registry/1","pid":1,"address":"x","port":70000})")
          .ok());
  EXPECT_FALSE(
      ParseRegistryEntry(R"({"schema":"choir.registry/1","pid":"one","address":"x","port":1})")
          .ok());
  EXPECT_TRUE(
      ParseRegistryEntry(R"({"schema":"choir.registry/1","pid":1,"address":"x","port":1})").ok());
}

TEST(RegistryTest, UnwritableDirectoryIsAnError) {
  auto r = WriteRegistryEntry("/proc/choir-no-such-dir", RegistryEntry{});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kSystemError);
}

}  // namespace
}  // namespace choir::diag
