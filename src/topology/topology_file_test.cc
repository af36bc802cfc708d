// Topology files: every validation error with its code, line and field; the
// round trip file -> Topology -> JSON -> Topology; reading from disk.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "choir/topology.h"
#include "store/store_test_util.h"

namespace choir {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// 2 hosts x 4 ranks, one group per socket (DOMAIN.md row 1 in small).
constexpr const char* kTwoHosts = R"({
  "version": 1,
  "hosts": [
    {"name": "a", "ranks": [0, 1, 2, 3], "groups": [[0, 1], [2, 3]]},
    {"name": "b", "ranks": [4, 5, 6, 7], "groups": [[4, 5], [6, 7]]}
  ]
})";

// Parses `text` and expects error E109 at `line` and `field`, whose message
// contains `fragment`.
void ExpectError(const std::string& text, int line, const std::string& field,
                 const std::string& fragment, int world = 0) {
  SCOPED_TRACE(text);
  const Result<Topology> r = ParseTopology(text, "topo.json", world);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kBadTopologyFile);
  EXPECT_EQ(r.status().number(), 109);
  EXPECT_THAT(r.status().message(),
              StartsWith("topo.json:" + std::to_string(line) + ": " + field + ": "));
  EXPECT_THAT(r.status().message(), HasSubstr(fragment));
}

TEST(TopologyFileTest, ReadsTwoHostsWithGroups) {
  const Result<Topology> r = ParseTopology(kTwoHosts, "topo.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Topology& t = *r;
  EXPECT_EQ(t.world_size, 8);
  EXPECT_EQ(t.source, "file topo.json");
  ASSERT_EQ(t.hosts.size(), 2u);
  EXPECT_EQ(t.hosts[1].name, "b");
  EXPECT_EQ(t.hosts[1].ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(t.hosts[1].groups, (std::vector<std::vector<int>>{{4, 5}, {6, 7}}));
  ASSERT_EQ(t.ranks.size(), 8u);
  EXPECT_EQ(t.ranks[5].rank, 5);
  EXPECT_EQ(t.ranks[5].host, "b");
  EXPECT_EQ(t.ranks[5].package, -1);
  ASSERT_NE(t.FindLink("inter_host"), nullptr);
  EXPECT_EQ(t.FindLink("inter_host")->bandwidth_gbps, 3.0);
  EXPECT_TRUE(ParseTopology(kTwoHosts, "topo.json", 8).ok());
}

TEST(TopologyFileTest, SortsHostsRanksAndGroups) {
  const Result<Topology> r = ParseTopology(R"({"version": 1, "hosts": [
      {"name": "b", "ranks": [3, 2], "groups": [[3], [2]]},
      {"name": "a", "ranks": [1, 0]}]})",
                                           "topo.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hosts[0].name, "a");
  EXPECT_EQ(r->hosts[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(r->hosts[1].groups, (std::vector<std::vector<int>>{{2}, {3}}));
  EXPECT_EQ(r->HostOf(3), 1);
  EXPECT_EQ(r->HostOf(0), 0);
  EXPECT_EQ(r->HostOf(4), -1);
}

TEST(TopologyFileTest, MalformedJsonNamesLineAndColumn) {
  const Result<Topology> r = ParseTopology(
      "{\n  \"version\": 1,\n  \"hosts\": [\n    {\"name\": \"a\" \"ranks\": [0]}\n  ]\n}",
      "topo.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kBadTopologyFile);
  EXPECT_THAT(r.status().message(), StartsWith("topo.json:4:24: malformed JSON: "));
  // A trailing comma.
  const Result<Topology> comma = ParseTopology("{\"version\": 1,\n\"hosts\": [],\n}", "topo.json");
  ASSERT_FALSE(comma.ok());
  EXPECT_THAT(comma.status().message(), StartsWith("topo.json:3:1: malformed JSON: "));
}

TEST(TopologyFileTest, TopLevelMustBeAnObject) {
  ExpectError("\n[1, 2]", 2, "(top level)", "not an array");
}

TEST(TopologyFileTest, Version) {
  ExpectError("{\n  \"hosts\": []\n}", 1, "version", "missing");
  ExpectError("{\n  \"version\": 2,\n  \"hosts\": []\n}", 2, "version", "newer than this choir");
  ExpectError("{\n  \"version\": 0, \"hosts\": []\n}", 2, "version", "the current version is 1");
  ExpectError("{\n  \"version\": \"1\"}", 2, "version", "must be the integer 1, not a string");
  ExpectError("{\n  \"version\": 1.0}", 2, "version", "must be the integer 1");
  ExpectError("{\n  \"version\": -1}", 2, "version", "not a topology file version");
  // A newer version is reported before the fields this choir does not know.
  ExpectError("{\"future_field\": 1,\n \"version\": 3}", 2, "version", "newer");
}

TEST(TopologyFileTest, UnknownFieldsAreRejectedWithASuggestion) {
  ExpectError(R"({"version": 1,
  "hots": []
})",
              2, "hots", "unknown field \"hots\" in the top level (did you mean \"hosts\"?)");
  ExpectError(R"({"version": 1,
  "hosts": [
    {"name": "a",
     "rnaks": [0]}
  ]
})",
              4, "hosts[0].rnaks", "(did you mean \"ranks\"?); known fields: name, ranks, groups");
  ExpectError(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "links": {"inter_host": {"bandwidth_gbps": 3,
                           "latency": 20}}
})",
              3, "links.inter_host.latency", "did you mean \"latency_us\"");
  ExpectError(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "links": {"inter_hots": {"bandwidth_gbps": 3}}
})",
              2, "links.inter_hots", "did you mean \"inter_host\"");
  ExpectError(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "ranks": [{"rank": 0,
             "nuna": 0}]
})",
              3, "ranks[0].nuna", "did you mean \"numa\"");
  ExpectError(R"({"version": 1,
  "zzzzzz": 1})",
              2, "zzzzzz", "known fields: version, world_size, comment, hosts, links, ranks");
}

TEST(TopologyFileTest, DuplicateKey) {
  ExpectError(R"({"version": 1,
  "hosts": [{"name": "a", "ranks": [0]}],
  "hosts": [{"name": "b", "ranks": [0]}]
})",
              3, "hosts", "appears twice (first at line 2)");
}

TEST(TopologyFileTest, MissingAndMistypedHostFields) {
  ExpectError("{\"version\": 1}", 1, "hosts", "missing");
  ExpectError("{\"version\": 1,\n\"hosts\": []}", 2, "hosts", "at least one host");
  ExpectError("{\"version\": 1,\n\"hosts\": {}}", 2, "hosts",
              "must be an array of hosts, not an object");
  ExpectError("{\"version\": 1, \"hosts\": [\n  {\"ranks\": [0]}]}", 2, "hosts[0].name", "missing");
  ExpectError("{\"version\": 1, \"hosts\": [\n  {\"name\": \"\", \"ranks\": [0]}]}", 2,
              "hosts[0].name", "must not be empty");
  ExpectError("{\"version\": 1, \"hosts\": [\n  {\"name\": \"a\"}]}", 2, "hosts[0].ranks",
              "missing");
  ExpectError("{\"version\": 1, \"hosts\": [\n  {\"name\": \"a\", \"ranks\": []}]}", 2,
              "hosts[0].ranks", "at least one rank");
  ExpectError("{\"version\": 1, \"hosts\": [{\"name\": \"a\", \"ranks\": [0,\n 1.5]}]}", 2,
              "hosts[0].ranks[1]", "must be an integer, not the number 1.5");
  ExpectError(
      "{\"version\": 1, \"hosts\": [{\"name\": \"a\", \"ranks\": [0]},\n"
      "  {\"name\": \"a\", \"ranks\": [1]}]}",
      2, "hosts[1].name", "host name \"a\" is already used by hosts[0] (line 1)");
  ExpectError(
      "{\"version\": 1, \"hosts\": [{\"name\": \"a\", \"ranks\": [0],\n"
      "  \"interface\": \"eth 0\"}]}",
      2, "hosts[0].interface", "not a network interface name");
  ExpectError(
      "{\"version\": 1, \"hosts\": [{\"name\": \"a\", \"ranks\": [0],\n"
      "  \"ip\": \"10.0.0.256\"}]}",
      2, "hosts[0].ip", "not an IPv4 or IPv6 address");
}

TEST(TopologyFileTest, DuplicateRankOnTwoHosts) {
  ExpectError(
      R"({
  "version": 1,
  "hosts": [
    {"name": "a", "ranks": [0, 1, 2, 3]},
    {"name": "b", "ranks": [4,
                            3, 5]}
  ]
})",
      6, "hosts[1].ranks[1]",
      "rank 3 is listed on two hosts, \"a\" and \"b\" (first at line 4, hosts[0].ranks[3])");
}

TEST(TopologyFileTest, DuplicateRankInOneHost) {
  ExpectError(R"({
  "version": 1,
  "hosts": [
    {"name": "a",
     "ranks": [0, 1, 1]}
  ]
})",
              5, "hosts[0].ranks[2]", "rank 1 is listed twice in host \"a\"");
}

TEST(TopologyFileTest, RankOnNoHost) {
  // World taken from the file's world_size.
  ExpectError(R"({
  "version": 1,
  "world_size": 8,
  "hosts": [
    {"name": "a", "ranks": [0, 1, 2, 3]},
    {"name": "b", "ranks": [4, 6]}
  ]
})",
              4, "hosts", "ranks 5,7 of the world of 8 are on no host");
  // World taken from the job.
  ExpectError(kTwoHosts, 3, "hosts", "ranks 8-9 of the world of 10 are on no host", 10);
  // World taken from the highest rank.
  ExpectError("{\"version\": 1,\n\"hosts\": [{\"name\": \"a\", \"ranks\": [0, 2]}]}", 2, "hosts",
              "rank 1 of the world of 3 is on no host");
}

TEST(TopologyFileTest, RankOutsideTheWorld) {
  ExpectError(R"({
  "version": 1,
  "hosts": [
    {"name": "a", "ranks": [0, 1, 2, 3]},
    {"name": "b", "ranks": [4, 5, 6,
                            9]}
  ]
})",
              6, "hosts[1].ranks[3]", "rank 9 is outside the world of 8 ranks (0-7)", 8);
  ExpectError("{\"version\": 1,\n\"hosts\": [{\"name\": \"a\", \"ranks\": [0,\n -1]}]}", 3,
              "hosts[0].ranks[1]", "rank -1 is outside the world of 1 ranks");
  ExpectError("{\"version\": 1,\n\"hosts\": [{\"name\": \"a\", \"ranks\": [\n2000000000]}]}", 3,
              "hosts[0].ranks[0]", "beyond the largest world choir supports");
  ExpectError(
      "{\"version\": 1,\n\"world_size\": 4,\n\"hosts\": [{\"name\": \"a\", \"ranks\": [0]}]}", 2,
      "world_size", "the file describes a world of 4 ranks, but the job has 8", 8);
  ExpectError(
      "{\"version\": 1,\n\"world_size\": 0,\n\"hosts\": [{\"name\": \"a\", \"ranks\": [0]}]}", 2,
      "world_size", "must be an integer from 1 to");
}

TEST(TopologyFileTest, GroupRankNotInItsHost) {
  ExpectError(R"({
  "version": 1,
  "hosts": [
    {"name": "a", "ranks": [0, 1, 2, 3],
     "groups": [[0, 1], [2, 3, 4]]},
    {"name": "b", "ranks": [4, 5, 6, 7]}
  ]
})",
              5, "hosts[0].groups[1][2]", "rank 4 is not a rank of host \"a\" (its ranks: 0-3)");
}

TEST(TopologyFileTest, OverlappingGroups) {
  ExpectError(R"({
  "version": 1,
  "hosts": [
    {"name": "a", "ranks": [0, 1, 2, 3],
     "groups": [[0, 1, 2],
                [2, 3]]}
  ]
})",
              6, "hosts[0].groups[1][0]", "rank 2 is already in hosts[0].groups[0] (line 5)");
}

TEST(TopologyFileTest, GroupsMustCoverTheirHost) {
  ExpectError(R"({
  "version": 1,
  "hosts": [
    {"name": "a", "ranks": [0, 1, 2, 3],
     "groups": [[0, 1], [3]]}
  ]
})",
              5, "hosts[0].groups", "rank 2 of host \"a\" is in no group");
  ExpectError(
      "{\"version\": 1, \"hosts\": [{\"name\": \"a\", \"ranks\": [0],\n \"groups\": [[]]}]}", 2,
      "hosts[0].groups[0]", "a group must hold at least one rank");
}

TEST(TopologyFileTest, Bandwidth) {
  ExpectError(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "links": {
    "inter_host": {"bandwidth_gbps": -3, "latency_us": 20}
  }
})",
              3, "links.inter_host.bandwidth_gbps", "bandwidth must be 0.001 to 100000 GB/s, not -3");
  ExpectError(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "links": {"intra_host": {
    "bandwidth_gbps": 0}}
})",
              3, "links.intra_host.bandwidth_gbps", "bandwidth must be 0.001 to 100000 GB/s, not 0");
  ExpectError(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "links": {"intra_host": {"bandwidth_gbps": "fast"}}
})",
              2, "links.intra_host.bandwidth_gbps", "must be a finite number, not a string");
  // Too large for a double: the JSON parser refuses it.
  const Result<Topology> overflow =
      ParseTopology(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "links": {"intra_host": {"bandwidth_gbps": 1e999}}})",
                    "topo.json");
  ASSERT_FALSE(overflow.ok());
  EXPECT_THAT(overflow.status().message(),
              StartsWith("topo.json:2:50: malformed JSON: number overflow parsing '1e999'"));
  ExpectError(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "links": {"intra_group": {"latency_us": -0.5}}
})",
              2, "links.intra_group.latency_us", "latency must be 0 to 10000000 us, not -0.5");
  // Tiny or huge values would turn the cost model's times into inf or 0.
  ExpectError(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "links": {"inter_host": {"bandwidth_gbps": 1e-320}}
})",
              2, "links.inter_host.bandwidth_gbps",
              "bandwidth must be 0.001 to 100000 GB/s, not 1e-320");
  ExpectError(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "links": {"inter_host": {"bandwidth_gbps": 1e300}}
})",
              2, "links.inter_host.bandwidth_gbps",
              "bandwidth must be 0.001 to 100000 GB/s, not 1e+300");
  ExpectError(R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
  "links": {"inter_host": {"latency_us": 1e300}}
})",
              2, "links.inter_host.latency_us", "latency must be 0 to 10000000 us, not 1e+300");
}

TEST(TopologyFileTest, PartialLinksKeepDefaults) {
  const Result<Topology> r = ParseTopology(
      R"({"version": 1, "hosts": [{"name": "a", "ranks": [0]}],
          "links": {"inter_host": {"bandwidth_gbps": 12.5}}})",
      "topo.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->FindLink("inter_host")->bandwidth_gbps, 12.5);
  EXPECT_EQ(r->FindLink("inter_host")->latency_us, DefaultLinks()[2].latency_us);
  EXPECT_EQ(r->FindLink("intra_group")->bandwidth_gbps, DefaultLinks()[0].bandwidth_gbps);
}

TEST(TopologyFileTest, RankEntries) {
  const std::string head = "{\"version\": 1, \"hosts\": [{\"name\": \"a\", \"ranks\": [0, 1]}],\n";
  ExpectError(head + "\"ranks\": [{\"rank\": 0},\n {\"rank\": 0}]}", 3, "ranks[1].rank",
              "rank 0 already has an entry (ranks[0], line 2)");
  ExpectError(head + "\"ranks\": [{\"rank\": 0},\n {\"rank\": 2}]}", 3, "ranks[1].rank",
              "rank 2 is outside the world of 2 ranks");
  ExpectError(head + "\"ranks\": [\n {\"ip\": \"10.0.0.1\"}]}", 3, "ranks[0].rank", "missing");
  ExpectError(head + "\"ranks\": [{\"rank\": 0,\n \"package\": -1}]}", 3, "ranks[0].package",
              "must be an integer from 0 to");
  ExpectError(head + "\"ranks\": [{\"rank\": 0, \"cores\": [1,\n 1]}]}", 3, "ranks[0].cores[1]",
              "CPU 1 is listed twice");
  ExpectError(head + "\"ranks\": [{\"rank\": 0,\n \"ip\": \"localhost\"}]}", 3, "ranks[0].ip",
              "not an IPv4 or IPv6 address");
  ExpectError(head + "\"ranks\": {}}", 2, "ranks", "must be an array");
}

TEST(TopologyFileTest, HostAndRankInterfacesAndAddresses) {
  const Result<Topology> r = ParseTopology(R"({"version": 1,
    "hosts": [{"name": "a", "ranks": [0, 1], "interface": "eth0", "ip": "10.0.0.1"},
              {"name": "b", "ranks": [2, 3], "ip": "fd00::2"}],
    "ranks": [{"rank": 1, "interface": "ib0", "ip": "10.0.1.1", "package": 1, "numa": 3,
               "cores": [9, 8]}]})",
                                           "topo.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ranks[0].interface, "eth0");
  EXPECT_EQ(r->ranks[0].ip, "10.0.0.1");
  EXPECT_EQ(r->ranks[1].interface, "ib0");
  EXPECT_EQ(r->ranks[1].ip, "10.0.1.1");
  EXPECT_EQ(r->ranks[1].package, 1);
  EXPECT_EQ(r->ranks[1].numa, 3);
  EXPECT_EQ(r->ranks[1].cores, (std::vector<int>{8, 9}));
  EXPECT_EQ(r->ranks[3].ip, "fd00::2");
  EXPECT_EQ(r->ranks[3].interface, "");
}

void ExpectSameTopology(const Topology& a, const Topology& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.world_size, b.world_size);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(a.ranks[r].rank, b.ranks[r].rank);
    EXPECT_EQ(a.ranks[r].host, b.ranks[r].host);
    EXPECT_EQ(a.ranks[r].package, b.ranks[r].package);
    EXPECT_EQ(a.ranks[r].numa, b.ranks[r].numa);
    EXPECT_EQ(a.ranks[r].cores, b.ranks[r].cores);
    EXPECT_EQ(a.ranks[r].interface, b.ranks[r].interface);
    EXPECT_EQ(a.ranks[r].ip, b.ranks[r].ip);
  }
  ASSERT_EQ(a.hosts.size(), b.hosts.size());
  for (size_t h = 0; h < a.hosts.size(); ++h) {
    EXPECT_EQ(a.hosts[h].name, b.hosts[h].name);
    EXPECT_EQ(a.hosts[h].ranks, b.hosts[h].ranks);
    EXPECT_EQ(a.hosts[h].groups, b.hosts[h].groups);
  }
  ASSERT_EQ(a.links.size(), b.links.size());
  for (size_t l = 0; l < a.links.size(); ++l) {
    EXPECT_EQ(a.links[l].name, b.links[l].name);
    EXPECT_EQ(a.links[l].bandwidth_gbps, b.links[l].bandwidth_gbps);
    EXPECT_EQ(a.links[l].latency_us, b.links[l].latency_us);
  }
}

TEST(TopologyFileTest, RoundTripFileTopologyJsonTopology) {
  const std::string file = R"({
  "version": 1,
  "comment": "two hosts, two sockets each",
  "hosts": [
    {"name": "node-a", "ranks": [0, 1, 2, 3], "groups": [[0, 1], [2, 3]], "interface": "eth0"},
    {"name": "node-b", "ranks": [4, 5, 6, 7], "groups": [[4, 5], [6, 7]], "ip": "10.0.0.2"}
  ],
  "links": {
    "intra_group": {"bandwidth_gbps": 25.5, "latency_us": 0.3},
    "inter_host": {"bandwidth_gbps": 3.125, "latency_us": 12}
  },
  "ranks": [
    {"rank": 0, "package": 0, "numa": 0, "cores": [0, 1], "ip": "10.0.0.1"},
    {"rank": 5, "interface": "eth1", "package": 0, "numa": 0, "cores": [2, 3]},
    {"rank": 7, "package": 1, "numa": 1, "cores": [6, 7]}
  ]
})";
  const Result<Topology> first = ParseTopology(file, "topo.json");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string json = TopologyToJson(*first);
  const Result<Topology> second = ParseTopology(json, "written.json");
  ASSERT_TRUE(second.ok()) << second.status().ToString() << "\n" << json;
  ExpectSameTopology(*first, *second);
  // Writing is stable: the second write equals the first apart from the comment.
  Topology again = *second;
  again.source = first->source;
  EXPECT_EQ(TopologyToJson(again), json);
  EXPECT_THAT(json, HasSubstr("\"ranks\": [0, 1, 2, 3], \"groups\": [[0, 1], [2, 3]]"));
}

TEST(TopologyFileTest, RoundTripOfASyntheticJob) {
  const Topology synthetic =
      SyntheticTopology(3, 4, /*interleave=*/true, "pack:2 numa:1 core:2 pu:2");
  const Result<Topology> back = ParseTopology(TopologyToJson(synthetic), "written.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << TopologyToJson(synthetic);
  ExpectSameTopology(synthetic, *back);
}

TEST(TopologyFileTest, LoadFromDisk) {
  store::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/topo.json";
  {
    std::ofstream out(path);
    out << kTwoHosts;
  }
  const Result<Topology> r = LoadTopologyFile(path, 8);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, "file " + path);
  EXPECT_EQ(r->world_size, 8);

  const Result<Topology> wrong_world = LoadTopologyFile(path, 4);
  ASSERT_FALSE(wrong_world.ok());
  EXPECT_THAT(wrong_world.status().message(),
              StartsWith(path + ":5: hosts[1].ranks[0]: rank 4 is outside"));

  const Result<Topology> missing = LoadTopologyFile(dir.path() + "/nope.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kBadTopologyFile);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot open topology file"));

  const Result<Topology> directory = LoadTopologyFile(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.status().message(), HasSubstr("not a regular file"));

  // A FIFO without a writer must not block.
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const Result<Topology> from_fifo = LoadTopologyFile(fifo);
  ASSERT_FALSE(from_fifo.ok());
  EXPECT_THAT(from_fifo.status().message(), HasSubstr("not a regular file"));
}

// Random byte edits of a valid file: every result is a Topology or an E109
// naming a line, never a crash or a hang.
TEST(TopologyFileTest, MutatedFilesNeverCrash) {
  const std::string base = R"({"version": 1, "world_size": 4, "comment": "x",
  "hosts": [{"name": "a", "ranks": [0, 1], "groups": [[0], [1]], "interface": "eth0"},
            {"name": "b", "ranks": [2, 3], "ip": "10.0.0.2"}],
  "links": {"intra_group": {"bandwidth_gbps": 20, "latency_us": 0.5}},
  "ranks": [{"rank": 0, "package": 0, "numa": 0, "cores": [0, 1]}]})";
  const std::string alphabet = "{}[]:,\"0123456789-.eE aznul\n\\";
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&state]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = next() % text.size();
      switch (next() % 3) {
        case 0:
          text[at] = alphabet[next() % alphabet.size()];
          break;
        case 1:
          text.erase(at, 1 + next() % 8);
          break;
        default:
          text.insert(at, 1, alphabet[next() % alphabet.size()]);
      }
      if (text.empty()) text = "{";
    }
    const Result<Topology> r = ParseTopology(text, "m.json", static_cast<int>(next() % 6));
    if (r.ok()) {
      ++parsed;
      EXPECT_EQ(static_cast<int>(r->ranks.size()), r->world_size);
    } else {
      EXPECT_EQ(r.status().code(), Code::kBadTopologyFile) << r.status().ToString();
      EXPECT_THAT(r.status().message(), StartsWith("m.json:"));
    }
  }
  EXPECT_GT(parsed, 0);
}

TEST(TopologyFileTest, BadWorldSizeArgument) {
  const Result<Topology> r = ParseTopology(kTwoHosts, "topo.json", -1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace choir
