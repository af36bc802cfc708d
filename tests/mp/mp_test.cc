// Multi-process tests: real ranks started by `choir run`, for every world size
// the core issue names and both transports, plus the failure paths (a rank
// killed mid-collective, a rank that exits, mismatched collectives, a silent
// rank, a store that never answers, bad launch environments). Every test
// bounds its run time, so a hang fails the test instead of blocking CI.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/socket.h"
#include "testing/temp_dir.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  int exit_code = -1;  // 128+signal when killed
  std::string out;     // stdout and stderr, interleaved
  double seconds = 0;
  bool timed_out = false;
};

// Runs argv with extra environment variables, killing its process group after `timeout_s`.
Outcome RunCommand(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            double timeout_s) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return {};
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(pipefd[1]);
  Outcome o;
  char buf[65536];
  while (true) {
    const double left = timeout_s - std::chrono::duration<double>(Clock::now() - start).count();
    if (left <= 0) {
      o.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left * 1000) + 1) > 0) {
      const ssize_t n = read(pipefd[0], buf, sizeof(buf));
      if (n <= 0) break;
      o.out.append(buf, static_cast<size_t>(n));
    }
  }
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return o;
}

std::vector<std::string> Launch(int n, const std::vector<std::string>& program, int grace_s = 20) {
  std::vector<std::string> argv = {CHOIR_BIN, "run", "-n", std::to_string(n), "--grace", std::to_string(grace_s), "--"};
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

int Count(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

class SweepProcessTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

// tcp: channel algorithms over sockets. shm: the same-host algorithms
// (shared slots, single copy). shmrings: channel algorithms over the
// shared-memory rings (slots too small for any payload, no single copy).
TEST_P(SweepProcessTest, AllCollectivesAllTypesCorrect) {
  const auto [n, transport] = GetParam();
  std::map<std::string, std::string> env = {{"CHOIR_TIMEOUT", "120"}};
  std::string t = transport;
  if (transport == "shmrings") {
    t = "shm";
    env["CHOIR_SHM_SLOT_BYTES"] = "64";
    env["CHOIR_SHM_CMA"] = "off";
  }
  const Outcome o = RunCommand(Launch(n, {CHOIR_BIN, "sweep", "--transport", t}), env, 600);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_TRUE(Contains(o.out, "ALL OK")) << o.out;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, SweepProcessTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 7, 8),
                                            ::testing::Values(std::string("tcp"), std::string("shm"),
                                                              std::string("shmrings"))),
                         [](const auto& p) {
                           return std::get<1>(p.param) + "_n" + std::to_string(std::get<0>(p.param));
                         });

// Buffers from choir::SharedBuffer: the same-host algorithms read and write
// the peers' buffers directly, shown as "+shared" after the algorithm's name.
class SharedBufferSweepTest : public ::testing::TestWithParam<int> {};

TEST_P(SharedBufferSweepTest, AllCollectivesAllTypesCorrect) {
  const Outcome o = RunCommand(Launch(GetParam(), {CHOIR_BIN, "sweep", "--transport", "shm", "--buffers", "shared"}),
                               {{"CHOIR_TIMEOUT", "120"}}, 600);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_TRUE(Contains(o.out, "ALL OK")) << o.out;
  EXPECT_TRUE(Contains(o.out, "cma+shared")) << o.out;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, SharedBufferSweepTest, ::testing::Values(2, 3, 4),
                         [](const auto& p) { return "n" + std::to_string(p.param); });

// Large enough collectives choose shm_pipe (int64 allreduce of 2200001
// elements is 17.6 MB, past cma's range whether or not the ranks share
// cores); with shared buffers it reads the peers' buffers instead of
// staging chunks.
class SharedBufferLargeTest : public ::testing::TestWithParam<int> {};

TEST_P(SharedBufferLargeTest, LargeMessagesSkipThePipe) {
  const Outcome o = RunCommand(
      Launch(GetParam(), {CHOIR_BIN, "sweep", "--transport", "shm", "--buffers", "shared", "--counts", "1100000,2200001",
                          "--ops", "allreduce,allgather,reduce_scatter,broadcast", "--dtypes", "float32,bfloat16,int64"}),
      {{"CHOIR_TIMEOUT", "120"}}, 600);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_TRUE(Contains(o.out, "ALL OK")) << o.out;
  EXPECT_TRUE(Contains(o.out, "shm_pipe+shared")) << o.out;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, SharedBufferLargeTest, ::testing::Values(2, 3),
                         [](const auto& p) { return "n" + std::to_string(p.param); });

TEST(SharedBufferMixTest, RanksWithSharedAndOrdinaryBuffersWorkTogether) {
  const std::string script = std::string("if [ \"$RANK\" = 1 ]; then exec ") + CHOIR_BIN +
                             " sweep --buffers shared --counts 0,7,70001,1100000 --sum-only; else exec " + CHOIR_BIN +
                             " sweep --counts 0,7,70001,1100000 --sum-only; fi";
  const Outcome o = RunCommand(Launch(3, {"/bin/sh", "-c", script}), {{"CHOIR_TIMEOUT", "120"}}, 600);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_TRUE(Contains(o.out, "ALL OK")) << o.out;
  // Rank 0's buffers are ordinary; it reads rank 1's shared ones directly.
  EXPECT_TRUE(Contains(o.out, "+shared")) << o.out;
}

TEST(SharedBufferMixTest, WithoutSingleCopyPermissionSharedBuffersTakeTheOrdinaryPaths) {
  const Outcome o = RunCommand(Launch(2, {CHOIR_BIN, "sweep", "--buffers", "shared", "--counts", "0,7,70001,1100000",
                                          "--sum-only"}),
                               {{"CHOIR_TIMEOUT", "120"}, {"CHOIR_SHM_CMA", "off"}}, 600);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_TRUE(Contains(o.out, "ALL OK")) << o.out;
  EXPECT_FALSE(Contains(o.out, "+shared")) << o.out;
  EXPECT_TRUE(Contains(o.out, "shm_pipe")) << o.out;
}

// Ranks of one host that name different same-host switch-point tables would
// pick different algorithms for one call: they stop at start-up instead, with
// an error naming the setting.
TEST(SwitchTableTest, DifferentTablesOnOneHostAreAnInvalidSetting) {
  const std::string script = std::string("if [ \"$RANK\" = 1 ]; then export CHOIR_SHM_TUNING=amd; "
                                         "else export CHOIR_SHM_TUNING=intel; fi; exec ") +
                             CHOIR_BIN + " sweep --transport shm --counts 7 --sum-only";
  const Outcome o = RunCommand(Launch(2, {"/bin/sh", "-c", script}), {{"CHOIR_TIMEOUT", "30"}}, 120);
  EXPECT_FALSE(o.timed_out);
  EXPECT_NE(o.exit_code, 0) << o.out;
  // Each rank reports it itself (the launcher's grace period lets it).
  EXPECT_TRUE(Contains(o.out, "[0] E105 InvalidSetting: rank 0 uses the 'intel'")) << o.out;
  EXPECT_TRUE(Contains(o.out, "[1] E105 InvalidSetting: rank 1 uses the 'amd'")) << o.out;
  EXPECT_TRUE(Contains(o.out, "CHOIR_SHM_TUNING")) << o.out;
  EXPECT_FALSE(Contains(o.out, "ALL OK")) << o.out;
}

class FaultTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultTest, KilledRankGivesPeerLostOnEverySurvivor) {
  const Outcome o = RunCommand(Launch(3, {FAULT_RANK_BIN, "kill", "1"}),
                        {{"CHOIR_TIMEOUT", "30"}, {"CHOIR_TRANSPORT", GetParam()}}, 60);
  EXPECT_FALSE(o.timed_out);
  EXPECT_TRUE(Contains(o.out, "RESULT E304 rank=0")) << o.out;
  EXPECT_TRUE(Contains(o.out, "RESULT E304 rank=2")) << o.out;
  EXPECT_TRUE(Contains(o.out, "rank 1")) << o.out;       // the dead rank is named
  EXPECT_EQ(o.exit_code, 128 + SIGKILL) << o.out;         // the launcher reports the first failure
  EXPECT_LT(o.seconds, 30);                                // well within the deadline
}

TEST_P(FaultTest, RankThatLeavesAfterItsPartIsNoFailure) {
  const Outcome o = RunCommand(Launch(3, {FAULT_RANK_BIN, "leave-early"}),
                        {{"CHOIR_TIMEOUT", "30"}, {"CHOIR_TRANSPORT", GetParam()}}, 60);
  EXPECT_FALSE(o.timed_out);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(Contains(o.out, "RESULT OK rank=" + std::to_string(r))) << o.out;
  EXPECT_EQ(o.exit_code, 0) << o.out;
}

TEST_P(FaultTest, ExitedRankGivesPeerLost) {
  const Outcome o = RunCommand(Launch(3, {FAULT_RANK_BIN, "exit", "2"}),
                        {{"CHOIR_TIMEOUT", "30"}, {"CHOIR_TRANSPORT", GetParam()}}, 60);
  EXPECT_FALSE(o.timed_out);
  EXPECT_TRUE(Contains(o.out, "RESULT E304 rank=0")) << o.out;
  EXPECT_TRUE(Contains(o.out, "RESULT E304 rank=1")) << o.out;
  // 7 from rank 2, or 4 from a survivor that the launcher happened to reap first.
  EXPECT_TRUE(o.exit_code == 7 || o.exit_code == 4) << o.out;
}

TEST_P(FaultTest, MismatchedCountEveryRankGetsMismatch) {
  const Outcome o = RunCommand(Launch(3, {FAULT_RANK_BIN, "mismatch"}),
                        {{"CHOIR_TIMEOUT", "30"}, {"CHOIR_TRANSPORT", GetParam()}}, 60);
  EXPECT_FALSE(o.timed_out);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(Contains(o.out, "RESULT E401 rank=" + std::to_string(r))) << o.out;
  }
  EXPECT_TRUE(Contains(o.out, "float32 x 1023")) << o.out;  // both signatures are shown
  EXPECT_TRUE(Contains(o.out, "float32 x 1024")) << o.out;
}

TEST_P(FaultTest, SilentRankTimesOutNamingIt) {
  const Outcome o = RunCommand(Launch(3, {FAULT_RANK_BIN, "silent", "2"}, /*grace_s=*/1),
                        {{"CHOIR_TIMEOUT", "2"}, {"CHOIR_STALL_SECONDS", "0.5"}, {"CHOIR_TRANSPORT", GetParam()}}, 60);
  EXPECT_FALSE(o.timed_out);
  EXPECT_TRUE(Contains(o.out, "RESULT E400")) << o.out;
  EXPECT_TRUE(Contains(o.out, "rank 2")) << o.out;
  EXPECT_LT(o.seconds, 30);
}

INSTANTIATE_TEST_SUITE_P(Transports, FaultTest, ::testing::Values("tcp", "shm"));

TEST(EnvironmentTest, BadLaunchEnvironmentsGiveNumberedErrors) {
  struct Case {
    std::map<std::string, std::string> env;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "E101"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "-4"}}, "E101"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4294967297"}}, "E101"},  // ran as a 1-rank world when cut to int
      {{{"RANK", "5"}, {"WORLD_SIZE", "2"}}, "E102"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "two"}}, "E105"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"CHOIR_TIMEOUT", "soon"}}, "E105"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"CHOIR_TRANSPORT", "pigeon"}}, "E105"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"CHOIR_STORE_ADDR", "nohostport"}}, "E100"},
  };
  for (const auto& c : cases) {
    const Outcome o = RunCommand({FAULT_RANK_BIN, "create"}, c.env, 20);
    EXPECT_FALSE(o.timed_out);
    EXPECT_TRUE(Contains(o.out, "RESULT " + c.want)) << c.want << ": " << o.out;
  }
}

// A rank started with a rank beyond its peers' world tells them through the
// store: they stop with E403 naming it within seconds (their timeout is 60 s),
// within the launcher's grace period after the first failure.
TEST(EnvironmentTest, ARankOutsideTheWorldIsNamedToTheOthers) {
  const std::string script = "[ \"$RANK\" = 2 ] && export RANK=5; exec \"$0\" create";
  const Outcome o = RunCommand(Launch(3, {"/bin/sh", "-c", script, FAULT_RANK_BIN}, 30), {{"CHOIR_TIMEOUT", "60"}}, 90);
  EXPECT_FALSE(o.timed_out);
  EXPECT_TRUE(Contains(o.out, "RESULT E102")) << o.out;
  EXPECT_TRUE(Contains(o.out, "RANK is 5 but WORLD_SIZE is 3")) << o.out;
  size_t told = 0;
  for (size_t at = o.out.find("RESULT E403"); at != std::string::npos; at = o.out.find("RESULT E403", at + 1)) ++told;
  EXPECT_EQ(told, 2u) << o.out;
  EXPECT_TRUE(Contains(o.out, "rank 5 (pid ")) << o.out;
  EXPECT_TRUE(Contains(o.out, "E102 InvalidRank: rank 5 is outside [0, 3)")) << o.out;
  EXPECT_LT(o.seconds, 30) << o.out;
  EXPECT_NE(o.exit_code, 0);
}

TEST(EnvironmentTest, StoreThatNeverAnswersTimesOut) {
  // Accepts connections but never says a word.
  auto listener = choir::net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  const int port = choir::net::LocalPort(listener->get());
  const Outcome o = RunCommand({FAULT_RANK_BIN, "create"},
                        {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"CHOIR_TIMEOUT", "1.5"},
                         {"CHOIR_STORE_ADDR", "127.0.0.1:" + std::to_string(port)}},
                        30);
  EXPECT_FALSE(o.timed_out);
  EXPECT_TRUE(Contains(o.out, "RESULT E300") || Contains(o.out, "RESULT E200")) << o.out;
  EXPECT_LT(o.seconds, 10);
}

TEST(EnvironmentTest, NoStoreAtAllIsUnreachable) {
  auto listener = choir::net::Listen("127.0.0.1", 0);  // reserve a port, then free it
  ASSERT_TRUE(listener.ok());
  const int port = choir::net::LocalPort(listener->get());
  listener->Reset();
  const Outcome o = RunCommand({FAULT_RANK_BIN, "create"},
                        {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"CHOIR_TIMEOUT", "1"},
                         {"CHOIR_STORE_ADDR", "127.0.0.1:" + std::to_string(port)}},
                        30);
  EXPECT_FALSE(o.timed_out);
  EXPECT_TRUE(Contains(o.out, "RESULT E301") || Contains(o.out, "RESULT E201")) << o.out;
}

}  // namespace

// Every rank must read the same topology file: a node with another version of
// the rank table is refused at creation, naming both files, instead of
// running with two views of which ranks share a host.
TEST(EnvironmentTest, DifferentTopologyFilesAreAClusterMismatch) {
  const choir::testing::TempDir temp("choir-topo-mismatch");
  const std::string dir = temp.path() + "/";
  for (int r = 0; r < 2; ++r) {
    std::FILE* f = std::fopen((dir + "choir_topo_rank" + std::to_string(r) + ".json").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "{\"version\": 1, \"hosts\": [{\"name\": \"h\", \"ranks\": [0, 1]}], "
                    "\"links\": {\"intra_host\": {\"bandwidth_gbps\": %d}}}\n", 5 + r);
    std::fclose(f);
  }
  const std::string script = "CHOIR_TOPO_FILE=" + dir + "choir_topo_rank$RANK.json exec \"$0\" create";
  const Outcome o = RunCommand(Launch(2, {"/bin/sh", "-c", script, FAULT_RANK_BIN}), {{"CHOIR_TIMEOUT", "20"}}, 60);
  EXPECT_FALSE(o.timed_out);
  EXPECT_TRUE(Contains(o.out, "RESULT E604")) << o.out;
  EXPECT_TRUE(Contains(o.out, "choir_topo_rank0.json")) << o.out;
  EXPECT_TRUE(Contains(o.out, "choir_topo_rank1.json")) << o.out;
  EXPECT_TRUE(Contains(o.out, "give every rank the same CHOIR_TOPO_FILE")) << o.out;
  EXPECT_NE(o.exit_code, 0);
}

// Ranks of one host that lay out their shared memory differently would read
// each other's pipes at the wrong offsets: refused at creation on every rank.
TEST(EnvironmentTest, DifferentSharedMemorySizesOnOneHostAreAClusterMismatch) {
  const std::string script = "CHOIR_SHM_PIPE_BYTES=$((64 + RANK * 64))K exec \"$0\" create";
  const Outcome o = RunCommand(Launch(2, {"/bin/sh", "-c", script, FAULT_RANK_BIN}),
                               {{"CHOIR_TIMEOUT", "20"}, {"CHOIR_TRANSPORT", "shm"}}, 60);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(Count(o.out, "RESULT E604"), 2) << o.out;
  EXPECT_TRUE(Contains(o.out, "CHOIR_SHM_PIPE_BYTES=65536")) << o.out;
  EXPECT_TRUE(Contains(o.out, "CHOIR_SHM_PIPE_BYTES=131072")) << o.out;
  EXPECT_TRUE(Contains(o.out, "give every rank of a host the same values")) << o.out;
  EXPECT_NE(o.exit_code, 0);
}
