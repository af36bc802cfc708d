// Black-box tests of `choir topo`: the command is run as a process with its
// output captured in files; every run has a deadline after which it is
// SIGKILLed and the test fails, so a hang cannot stall the suite.
//
// Thread-safety: each test runs on one thread.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/strings.h"
#include "choir/topology.h"
#include "store/store_test_util.h"

extern char** environ;

namespace choir {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

class TopoCliTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  // Runs `choir topo ARGS` without CHOIR_* settings from the caller's environment.
  Outcome Topo(const std::vector<std::string>& args, double seconds = 30) {
    const std::string out_path = Path("stdout");
    const std::string err_path = Path("stderr");
    std::vector<std::string> argv_storage = {CHOIR_CLI_PATH, "topo"};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<std::string> env_storage;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!strings::StartsWith(*e, "CHOIR_")) env_storage.emplace_back(*e);
    }
    std::vector<char*> argv;
    for (std::string& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (std::string& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);

    const pid_t pid = fork();
    if (pid == 0) {
      const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (out < 0 || err < 0) _exit(125);
      dup2(out, STDOUT_FILENO);
      dup2(err, STDERR_FILENO);
      execve(argv[0], argv.data(), envp.data());
      _exit(126);
    }
    Outcome outcome;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (true) {
      const pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) break;
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "choir topo did not finish within " << seconds << " s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    outcome.out = ReadFile(out_path);
    outcome.err = ReadFile(err_path);
    return outcome;
  }

  store::testing::TempDir dir_;
};

constexpr const char* kGood = R"({
  "version": 1,
  "hosts": [
    {"name": "node-a", "ranks": [0, 1, 2, 3], "groups": [[0, 1], [2, 3]]},
    {"name": "node-b", "ranks": [4, 5, 6, 7], "groups": [[4, 5], [6, 7]]}
  ]
}
)";

constexpr const char* kDuplicateRank = R"({
  "version": 1,
  "hosts": [
    {"name": "node-a", "ranks": [0, 1, 2, 3]},
    {"name": "node-b", "ranks": [4,
                                 3, 5, 6]}
  ]
}
)";

TEST_F(TopoCliTest, CheckGoodFile) {
  WriteFile(Path("good.json"), kGood);
  Outcome r = Topo({"--check", Path("good.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "PASS " + Path("good.json") + ": 8 ranks on 2 hosts, 4 groups\n");
  r = Topo({"--check", Path("good.json"), "-n", "8"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(TopoCliTest, CheckAgainstAnotherWorldSize) {
  WriteFile(Path("good.json"), kGood);
  const Outcome r = Topo({"--check", Path("good.json"), "-n", "16"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("E109 BadTopologyFile: " + Path("good.json") +
                                ":3: hosts: ranks 8-15 "
                                "of the world of 16 are on no host"));
}

TEST_F(TopoCliTest, CheckBadFileNamesLineAndField) {
  WriteFile(Path("bad.json"), kDuplicateRank);
  const Outcome r = Topo({"--check", Path("bad.json")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, StartsWith("E109 BadTopologyFile: " + Path("bad.json") +
                                ":6: hosts[1].ranks[1]: rank 3 is listed on two hosts"));
}

TEST_F(TopoCliTest, CheckMalformedJson) {
  WriteFile(Path("broken.json"), "{\n  \"version\": 1,\n  \"hosts\": [\n");
  const Outcome r = Topo({"--check", Path("broken.json")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("E109 BadTopologyFile: " + Path("broken.json") + ":3:"));
  EXPECT_THAT(r.err, HasSubstr("malformed JSON"));
}

TEST_F(TopoCliTest, CheckJson) {
  WriteFile(Path("bad.json"), kDuplicateRank);
  Outcome r = Topo({"--check", Path("bad.json"), "--json"});
  EXPECT_EQ(r.exit_code, 1);
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["pass"], false);
  EXPECT_EQ(j["error"]["code"], 109);
  EXPECT_EQ(j["error"]["name"], "BadTopologyFile");
  EXPECT_THAT(j["error"]["message"].get<std::string>(), HasSubstr(":6: hosts[1].ranks[1]:"));

  WriteFile(Path("good.json"), kGood);
  r = Topo({"--check", Path("good.json"), "--json"});
  EXPECT_EQ(r.exit_code, 0);
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["pass"], true);
  EXPECT_EQ(j["world_size"], 8);
}

TEST_F(TopoCliTest, MissingFile) {
  const Outcome r = Topo({"--file", Path("nope.json")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("E109 BadTopologyFile: cannot open topology file"));
}

TEST_F(TopoCliTest, ShowsAFile) {
  WriteFile(Path("good.json"), kGood);
  const Outcome r = Topo({"--file", Path("good.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("source: file " + Path("good.json") + "\n"));
  EXPECT_THAT(r.out, HasSubstr("  node-b: ranks 4-7\n    group 0: ranks 4-5\n      rank 4: "));
  EXPECT_THAT(r.out, AnyOf(HasSubstr("plan: not available (E502 NotSupported"),
                           HasSubstr("plan (cost model")));
}

TEST_F(TopoCliTest, SyntheticTwoHostsTwoSockets) {
  const Outcome r = Topo({"--synthetic", "pack:2 numa:1 core:4 pu:1", "-n", "4", "--hosts", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("world: 8 ranks on 2 hosts (4 per host), 2 groups per host\n"));
  EXPECT_THAT(r.out, HasSubstr("    group 1: ranks 2-3 (package 1, NUMA 1)\n"
                               "      rank 2: package 1, NUMA 1, cores 4-5\n"));
  EXPECT_THAT(r.out, AnyOf(HasSubstr("plan: not available (E502 NotSupported"),
                           HasSubstr("plan (cost model")));
}

TEST_F(TopoCliTest, InterleavedRanks) {
  const Outcome r =
      Topo({"--synthetic", "pack:2 numa:1 core:4 pu:1", "-n", "4", "--hosts", "2", "--interleave"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("  host0: ranks 0,2,4,6\n    group 0: ranks 0,2 (package 0, NUMA 0)\n"));
}

TEST_F(TopoCliTest, WriteThenCheckRoundTrip) {
  const std::string written = Path("written.json");
  Outcome r = Topo(
      {"--synthetic", "pack:2 numa:1 core:4 pu:1", "-n", "4", "--hosts", "2", "--write", written});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("wrote " + written + "\n"));
  r = Topo({"--check", written, "-n", "8"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "PASS " + written + ": 8 ranks on 2 hosts, 4 groups\n");

  // The file reproduces the topology it was written from.
  const Result<Topology> back = LoadTopologyFile(written, 8);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const Topology original = SyntheticTopology(2, 4, false, "pack:2 numa:1 core:4 pu:1");
  ASSERT_EQ(back->hosts.size(), 2u);
  EXPECT_EQ(back->hosts[1].groups, original.hosts[1].groups);
  EXPECT_EQ(back->ranks[6].cores, original.ranks[6].cores);

  // --write - puts only the file on stdout.
  r = Topo({"--synthetic", "pack:1 numa:2 core:2 pu:1", "-n", "2", "--write", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Result<Topology> from_stdout = ParseTopology(r.out, "stdout");
  ASSERT_TRUE(from_stdout.ok()) << from_stdout.status().ToString() << "\n" << r.out;
  EXPECT_EQ(from_stdout->hosts[0].groups, (std::vector<std::vector<int>>{{0}, {1}}));
}

TEST_F(TopoCliTest, ThisMachine) {
  Outcome r = Topo({});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("source: detected on "));
  EXPECT_THAT(r.out, HasSubstr("this process: host "));

  r = Topo({"-n", "2", "--hosts", "2", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["topology"]["world_size"], 4);
  EXPECT_EQ(j["topology"]["hosts"].size(), 2u);
  EXPECT_TRUE(j["this_process"].is_object());
  EXPECT_TRUE(j.contains("plan"));
}

TEST_F(TopoCliTest, UsageErrors) {
  WriteFile(Path("good.json"), kGood);
  const std::vector<std::vector<std::string>> bad = {
      {"--bogus"},
      {"--file", Path("good.json"), "--synthetic", "pack:2 core:2 pu:1"},
      {"--check", Path("good.json"), "--hosts", "2"},
      {"--check", Path("good.json"), "--write", Path("x.json")},
      {"--file", Path("good.json"), "--interleave"},
      {"-n", "0"},
      {"-n", "many"},
      {"--hosts", "0"},
      {"--synthetic", "garbage:3"},
      {"--synthetic", "pack:100000 core:100000 pu:1"},
      {"--synthetic", " "},
      {"--check"},
  };
  for (const std::vector<std::string>& args : bad) {
    SCOPED_TRACE(fmt::format("choir topo {}", fmt::join(args, " ")));
    const Outcome r = Topo(args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, StartsWith("E602 UsageError: "));
    EXPECT_THAT(r.err, HasSubstr("choir topo --help"));
  }
}

// The example in docs/topology.md (its first ```json block) is a valid file.
TEST_F(TopoCliTest, DocumentedExamplePasses) {
  const std::string doc = ReadFile(CHOIR_TOPOLOGY_DOC);
  const size_t start = doc.find("```json\n");
  ASSERT_NE(start, std::string::npos) << "no ```json block in docs/topology.md";
  const size_t end = doc.find("```", start + 8);
  ASSERT_NE(end, std::string::npos);
  WriteFile(Path("example.json"), doc.substr(start + 8, end - start - 8));
  const Outcome r = Topo({"--check", Path("example.json"), "-n", "8"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "PASS " + Path("example.json") + ": 8 ranks on 2 hosts, 4 groups\n");
}

}  // namespace
}  // namespace choir
