// The topology model: lookups, synthetic jobs (hwloc synthetic machines),
// rank placement, grouping, detection on this machine, and the description.
#include "choir/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "params/params.h"
#include "topology/build.h"
#include "topology/machine.h"

namespace choir {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Groups = std::vector<std::vector<int>>;
using Ints = std::vector<int>;

constexpr const char* kTwoSockets = "pack:2 numa:1 core:4 pu:1";

// cpuid leaf 1 signatures of known CPUs decode to the family and model
// lscpu shows for them.
TEST(TopologyTest, CpuSignaturesDecodeToFamilyAndModel) {
  struct Known {
    uint32_t eax;
    int family;
    int model;
  };
  for (const Known& k : {Known{0x00A10F11, 0x19, 0x11},    // AMD EPYC 9004 (Zen 4)
                         Known{0x00A00F11, 0x19, 0x01},    // AMD EPYC 7003 (Zen 3)
                         Known{0x00830F10, 0x17, 0x31},    // AMD EPYC 7002 (Zen 2)
                         Known{0x000806F8, 0x06, 0x8F},    // Intel Xeon, Sapphire Rapids
                         Known{0x000C06F2, 0x06, 0xCF},    // Intel Xeon, Emerald Rapids
                         Known{0x00000F29, 0x0F, 0x02}}) {  // Intel Pentium 4
    const topology::CpuModel m = topology::DecodeCpuSignature(k.eax);
    EXPECT_EQ(m.family, k.family) << std::hex << k.eax;
    EXPECT_EQ(m.model, k.model) << std::hex << k.eax;
  }
}

TEST(TopologyTest, DefaultLinksAreOrderedFastestFirst) {
  const std::vector<LinkClass> links = DefaultLinks();
  ASSERT_EQ(links.size(), 3u);
  EXPECT_EQ(links[0].name, "intra_group");
  EXPECT_EQ(links[1].name, "intra_host");
  EXPECT_EQ(links[2].name, "inter_host");
  for (size_t i = 1; i < links.size(); ++i) {
    EXPECT_LT(links[i].bandwidth_gbps, links[i - 1].bandwidth_gbps);
    EXPECT_GT(links[i].latency_us, links[i - 1].latency_us);
  }
}

TEST(TopologyTest, FindLinkAndHostOf) {
  const Topology t = SyntheticTopology(2, 3, /*interleave=*/false);
  ASSERT_NE(t.FindLink("intra_host"), nullptr);
  EXPECT_EQ(t.FindLink("intra_host")->name, "intra_host");
  EXPECT_EQ(t.FindLink("nvlink"), nullptr);
  EXPECT_EQ(t.HostOf(0), 0);
  EXPECT_EQ(t.HostOf(2), 0);
  EXPECT_EQ(t.HostOf(3), 1);
  EXPECT_EQ(t.HostOf(6), -1);
  EXPECT_EQ(t.HostOf(-1), -1);
}

TEST(TopologyTest, SyntheticTwoSocketsGroupsBySocket) {
  const Topology t = SyntheticTopology(2, 4, /*interleave=*/false, kTwoSockets);
  EXPECT_EQ(t.world_size, 8);
  ASSERT_EQ(t.hosts.size(), 2u);
  EXPECT_EQ(t.hosts[0].name, "host0");
  EXPECT_EQ(t.hosts[0].ranks, (Ints{0, 1, 2, 3}));
  EXPECT_EQ(t.hosts[0].groups, (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(t.hosts[1].groups, (Groups{{4, 5}, {6, 7}}));
  EXPECT_EQ(t.ranks[0].cores, (Ints{0, 1}));
  EXPECT_EQ(t.ranks[0].package, 0);
  EXPECT_EQ(t.ranks[0].numa, 0);
  EXPECT_EQ(t.ranks[2].cores, (Ints{4, 5}));
  EXPECT_EQ(t.ranks[2].package, 1);
  EXPECT_EQ(t.ranks[6].host, "host1");
  EXPECT_EQ(t.ranks[6].package, 1);
  EXPECT_THAT(t.source, HasSubstr(kTwoSockets));
}

TEST(TopologyTest, InterleavedRanksStillGroupBySocket) {
  const Topology t = SyntheticTopology(2, 4, /*interleave=*/true, kTwoSockets);
  EXPECT_EQ(t.hosts[0].ranks, (Ints{0, 2, 4, 6}));
  EXPECT_EQ(t.hosts[1].ranks, (Ints{1, 3, 5, 7}));
  EXPECT_EQ(t.hosts[0].groups, (Groups{{0, 2}, {4, 6}}));
  EXPECT_EQ(t.ranks[4].package, 1);
  EXPECT_EQ(t.ranks[5].host, "host1");
}

TEST(TopologyTest, GroupsByNumaInsideOnePackage) {
  const Topology t = SyntheticTopology(1, 4, false, "pack:1 numa:2 core:2 pu:1");
  EXPECT_EQ(t.hosts[0].groups, (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(t.ranks[3].numa, 1);
  EXPECT_EQ(t.ranks[3].package, 0);
}

TEST(TopologyTest, GroupsByPackageWhenPackagesHoldSeveralNumaNodes) {
  const Topology t = SyntheticTopology(1, 8, false, "pack:2 numa:2 core:2 pu:2");
  EXPECT_EQ(t.hosts[0].groups, (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(t.ranks[1].numa, 0);
  EXPECT_EQ(t.ranks[2].numa, 1);
  EXPECT_EQ(t.ranks[1].cores, (Ints{2, 3}));  // one core, both hyperthreads
}

TEST(TopologyTest, FewerRanksThanNumaNodesSpreadOut) {
  const Topology t = SyntheticTopology(1, 2, false, "pack:2 numa:2 core:2 pu:1");
  EXPECT_EQ(t.ranks[0].package, 0);
  EXPECT_EQ(t.ranks[1].package, 1);
  EXPECT_EQ(t.ranks[0].cores, (Ints{0, 1}));
  EXPECT_EQ(t.hosts[0].groups, (Groups{{0}, {1}}));
}

TEST(TopologyTest, MoreRanksThanPusShareThem) {
  const Topology t = SyntheticTopology(1, 16, false, kTwoSockets);
  EXPECT_EQ(t.ranks[0].cores, (Ints{0}));
  EXPECT_EQ(t.ranks[1].cores, (Ints{0}));
  EXPECT_EQ(t.ranks[15].cores, (Ints{7}));
  EXPECT_EQ(t.hosts[0].groups.size(), 2u);
}

TEST(TopologyTest, NoMachineMeansNoGroups) {
  const Topology t = SyntheticTopology(3, 2, false);
  EXPECT_EQ(t.world_size, 6);
  EXPECT_TRUE(t.hosts[1].groups.empty());
  EXPECT_EQ(t.ranks[0].package, -1);
  EXPECT_TRUE(t.ranks[0].cores.empty());
  EXPECT_EQ(t.links.size(), 3u);
}

TEST(TopologyTest, BadShapesAndDescriptionsDoNotCrash) {
  EXPECT_EQ(SyntheticTopology(0, 4, false).world_size, 0);
  EXPECT_EQ(SyntheticTopology(2, -1, false).world_size, 0);
  EXPECT_EQ(SyntheticTopology(1 << 20, 1 << 20, false).world_size, 0);
  const Topology bad = SyntheticTopology(1, 2, false, "garbage:3");
  EXPECT_EQ(bad.world_size, 2);
  EXPECT_EQ(bad.ranks[0].package, -1);
  EXPECT_THAT(bad.source, HasSubstr("unusable"));
  // Refused before hwloc would build a billion PUs.
  const auto start = std::chrono::steady_clock::now();
  const Topology huge = SyntheticTopology(1, 2, false, "pack:1000 core:1000 pu:1000");
  EXPECT_THAT(huge.source, HasSubstr("more than"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_FALSE(DetectPlace("pack:4096 core:4096 pu:1").ok());
}

TEST(TopologyTest, MachineLayoutOfASyntheticMachine) {
  const Result<topology::MachineLayout> m =
      topology::LoadMachineLayout("pack:2 numa:2 core:2 pu:2");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->packages, 2);
  EXPECT_EQ(m->numa_nodes, 4);
  EXPECT_EQ(m->cores, 8);
  ASSERT_EQ(m->pus.size(), 16u);
  EXPECT_EQ(m->pus[5].core, 2);
  EXPECT_EQ(m->pus[5].numa, 1);
  EXPECT_EQ(m->pus[9].package, 1);
  EXPECT_EQ(m->pus[9].numa, 2);
}

TEST(TopologyTest, BindingGivesEachRankItsNodesShareOfTheAllowedCpus) {
  const Result<topology::MachineLayout> m = topology::LoadMachineLayout("pack:2 numa:1 core:4 pu:1");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<int> all;
  for (const auto& pu : m->pus) all.push_back(pu.pu);
  const topology::BindingPlan four = topology::PlanBinding(*m, all, 4);
  ASSERT_EQ(four.ranks.size(), 4u) << four.summary;
  EXPECT_EQ(four.ranks[0].cpus, (Ints{0, 1}));
  EXPECT_EQ(four.ranks[1].cpus, (Ints{2, 3}));
  EXPECT_EQ(four.ranks[2].cpus, (Ints{4, 5}));
  EXPECT_EQ(four.ranks[3].cpus, (Ints{6, 7}));
  EXPECT_EQ(four.ranks[0].numa, 0);  // two nodes: memory follows the CPUs
  EXPECT_EQ(four.ranks[3].numa, 1);
  EXPECT_EQ(four.summary, "binding: rank 0 -> CPU 0-1 (NUMA 0), rank 1 -> CPU 2-3 (NUMA 0), rank 2 -> CPU 4-5 (NUMA 1), "
                          "rank 3 -> CPU 6-7 (NUMA 1) (--bind none leaves them free)");
  // Only the CPUs the launcher may use are handed out.
  const topology::BindingPlan restricted = topology::PlanBinding(*m, {0, 1, 2, 3}, 2);
  ASSERT_EQ(restricted.ranks.size(), 2u) << restricted.summary;
  EXPECT_EQ(restricted.ranks[0].cpus, (Ints{0, 1}));
  EXPECT_EQ(restricted.ranks[1].cpus, (Ints{2, 3}));
  // Nobody is bound: one rank, more ranks than CPUs, fewer ranks than nodes.
  const topology::BindingPlan one = topology::PlanBinding(*m, all, 1);
  EXPECT_TRUE(one.ranks.empty());
  EXPECT_EQ(one.summary, "binding: 1 rank, left free");
  // CPUs 3-6 leave node 0 one CPU for its two ranks: nobody is pinned onto a shared CPU.
  const topology::BindingPlan uneven = topology::PlanBinding(*m, {3, 4, 5, 6}, 4);
  EXPECT_TRUE(uneven.ranks.empty());
  EXPECT_EQ(uneven.summary, "binding: the allowed CPUs are spread too unevenly over the NUMA nodes for 4 ranks, not bound");
  const topology::BindingPlan crowded = topology::PlanBinding(*m, {0, 1}, 3);
  EXPECT_TRUE(crowded.ranks.empty());
  EXPECT_EQ(crowded.summary, "binding: 3 ranks on 2 CPUs share them, not bound");
  const Result<topology::MachineLayout> wide = topology::LoadMachineLayout("pack:4 numa:1 core:2 pu:1");
  ASSERT_TRUE(wide.ok());
  std::vector<int> wide_all;
  for (const auto& pu : wide->pus) wide_all.push_back(pu.pu);
  const topology::BindingPlan sparse = topology::PlanBinding(*wide, wide_all, 2);
  EXPECT_TRUE(sparse.ranks.empty());
  EXPECT_EQ(sparse.summary, "binding: 2 ranks on 4 NUMA nodes, not bound (binding would idle nodes)");
}

TEST(TopologyTest, AssembleGroupsHostsByName) {
  std::vector<RankPlace> places(4);
  places[0].host = "b";
  places[1].host = "a";
  places[2].host = "b";
  places[3].host = "a";
  places[0].package = 0;
  places[0].numa = 0;
  places[2].package = 1;
  places[2].numa = 1;
  const Topology t = topology::AssembleTopology(places, "test");
  ASSERT_EQ(t.hosts.size(), 2u);
  EXPECT_EQ(t.hosts[0].name, "b");
  EXPECT_EQ(t.hosts[0].ranks, (Ints{0, 2}));
  EXPECT_EQ(t.hosts[0].groups, (Groups{{0}, {2}}));
  EXPECT_TRUE(t.hosts[1].groups.empty());  // places unknown: no guess
  EXPECT_EQ(t.ranks[3].rank, 3);
}

TEST(TopologyTest, FormatRankList) {
  using topology::FormatRankList;
  EXPECT_EQ(FormatRankList({}), "");
  EXPECT_EQ(FormatRankList({5}), "5");
  EXPECT_EQ(FormatRankList({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(FormatRankList({0, 2, 4}), "0,2,4");
  EXPECT_EQ(FormatRankList({0, 1, 2, 3, 8, 9, 11}), "0-3,8-9,11");
}

TEST(DetectTest, ThisMachine) {
  const Result<RankPlace> place = DetectPlace();
  ASSERT_TRUE(place.ok()) << place.status().ToString();
  EXPECT_FALSE(place->host.empty());
  // This process is not bound: it may run on every CPU hwloc sees.
  const unsigned cpus = std::thread::hardware_concurrency();
  ASSERT_FALSE(place->cores.empty());
  EXPECT_LE(place->cores.size(), std::max(1u, cpus));
  const Result<topology::MachineLayout> machine = topology::LoadMachineLayout("");
  ASSERT_TRUE(machine.ok()) << machine.status().ToString();
  EXPECT_GE(machine->cores, 1);
  EXPECT_GE(machine->pus.size(), place->cores.size());
  if (machine->packages == 1) {
    EXPECT_GE(place->package, 0);
  }
  if (machine->numa_nodes == 1) {
    EXPECT_GE(place->numa, 0);
  }
}

TEST(DetectTest, HostIdSettingWins) {
  params::ScopedOverride host("CHOIR_HOST_ID", "node-7");
  const Result<RankPlace> place = DetectPlace();
  ASSERT_TRUE(place.ok());
  EXPECT_EQ(place->host, "node-7");
}

TEST(DetectTest, SyntheticMachineReportsItsFirstPu) {
  const Result<RankPlace> place = DetectPlace("pack:2 numa:1 core:4 pu:2");
  ASSERT_TRUE(place.ok()) << place.status().ToString();
  EXPECT_EQ(place->package, 0);
  EXPECT_EQ(place->numa, 0);
  EXPECT_EQ(place->cores, (Ints{0}));
}

TEST(DetectTest, NumaNodeAbovePackages) {
  // The NUMA node's ancestors hold no package; the package comes from the binding.
  const Result<RankPlace> place = DetectPlace("pack:2 core:2 pu:1");
  ASSERT_TRUE(place.ok()) << place.status().ToString();
  EXPECT_EQ(place->numa, 0);
  EXPECT_EQ(place->package, 0);
}

TEST(DetectTest, BadSyntheticDescriptionIsAnError) {
  const Result<RankPlace> place = DetectPlace("not a machine");
  ASSERT_FALSE(place.ok());
  EXPECT_EQ(place.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(place.status().message(), HasSubstr("hwloc rejected"));
}

TEST(DescribeTest, TwoHostsTwoSockets) {
  const std::string text = DescribeTopology(SyntheticTopology(2, 4, false, kTwoSockets));
  EXPECT_THAT(text, HasSubstr("world: 8 ranks on 2 hosts (4 per host), 2 groups per host\n"));
  EXPECT_THAT(text, HasSubstr("inside a group: 4 groups of 2 ranks\n"));
  EXPECT_THAT(text, HasSubstr("between the groups of a host\n"));
  EXPECT_THAT(text, HasSubstr("between hosts: 2 hosts\n"));
  EXPECT_THAT(text, HasSubstr("\n  host1: ranks 4-7\n"
                              "    group 0: ranks 4-5 (package 0, NUMA 0)\n"
                              "      rank 4: package 0, NUMA 0, cores 0-1\n"
                              "      rank 5: package 0, NUMA 0, cores 2-3\n"
                              "    group 1: ranks 6-7 (package 1, NUMA 1)\n"));
}

TEST(DescribeTest, UngroupedSingleHost) {
  Topology t = SyntheticTopology(1, 2, false);
  t.ranks[1].interface = "eth0";
  t.ranks[1].ip = "10.0.0.1";
  const std::string text = DescribeTopology(t);
  EXPECT_THAT(text, HasSubstr("world: 2 ranks on 1 host (2 per host)\n"));
  EXPECT_THAT(text, Not(HasSubstr("groups per host")));
  EXPECT_THAT(text, HasSubstr("not used (no groups inside hosts)"));
  EXPECT_THAT(text, HasSubstr("inside a host: 1 host of 2 ranks"));
  EXPECT_THAT(text, HasSubstr("not used (one host)"));
  EXPECT_THAT(text, HasSubstr("\n  host0: ranks 0-1\n    rank 0: package ?, NUMA ?, cores ?\n"));
  EXPECT_THAT(text, HasSubstr("rank 1: package ?, NUMA ?, cores ?, interface eth0, ip 10.0.0.1\n"));
}

TEST(DescribeTest, OneRankGroups) {
  const std::string text = DescribeTopology(SyntheticTopology(1, 2, false, "pack:2 core:1 pu:1"));
  EXPECT_THAT(text, HasSubstr("inside a group: 2 groups of 1 rank\n"));
  // Without a numa level hwloc puts one NUMA node above both packages.
  EXPECT_THAT(text, HasSubstr("    group 1: rank 1 (package 1, NUMA 0)\n"));
}

TEST(DescribeTest, EmptyTopology) {
  const std::string text = DescribeTopology(Topology{});
  EXPECT_THAT(text, HasSubstr("world: 0 ranks on 0 hosts"));
}

}  // namespace
}  // namespace choir

namespace choir::topology {
namespace {

TEST(CacheBytesTest, ReadsTheKernelsListOrNothing) {
  // Whatever this host lists: a last-level cache of at least 1 MiB in whole
  // KiB, or 0 where sysfs has no cache directory (some containers).
  const size_t l3 = CacheBytes(3);
  if (l3 != 0) {
    EXPECT_GE(l3, size_t{1} << 20);
    EXPECT_EQ(l3 % 1024, 0u);
    EXPECT_GT(CacheBytes(1), 0u);
  }
  EXPECT_EQ(CacheBytes(9), 0u);  // no such level
}

}  // namespace
}  // namespace choir::topology
