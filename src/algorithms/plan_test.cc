// The plan `choir topo` prints: hierarchical algorithms win across hosts, the
// shared area on one host, and the field's interleaved ring is predicted slow.
#include <gtest/gtest.h>

#include "algorithms/algorithms.h"
#include "algorithms/block_steps.h"
#include "algorithms/local_ops.h"
#include "algorithms/switch_points.h"
#include "choir/topology.h"
#include "params/params.h"
#include "topology/machine.h"

namespace choir {
namespace {

Topology Make(int hosts, int per_host, bool interleave) {
  Topology t;
  t.world_size = hosts * per_host;
  t.hosts.resize(static_cast<size_t>(hosts));
  for (int h = 0; h < hosts; ++h) t.hosts[static_cast<size_t>(h)].name = "host" + std::to_string(h);
  for (int r = 0; r < t.world_size; ++r) {
    const int h = interleave ? r % hosts : r / per_host;
    t.hosts[static_cast<size_t>(h)].ranks.push_back(r);
  }
  t.links = {{"intra_host", 10, 1}, {"inter_host", 0.25, 20}};  // a slow link between hosts
  // A core per rank, so that the plan does not depend on this machine's.
  for (int r = 0; r < t.world_size; ++r) {
    RankPlace p;
    p.rank = r;
    p.host = "host" + std::to_string(interleave ? r % hosts : r / per_host);
    p.cores = {r % per_host};
    t.ranks.push_back(p);
  }
  return t;
}

const PlanRow* Row(const std::vector<PlanRow>& rows, const std::string& coll, uint64_t bytes) {
  for (const auto& r : rows) {
    if (r.collective == coll && bytes >= r.min_bytes && bytes < r.max_bytes) return &r;
  }
  return nullptr;
}

TEST(PlanTest, InterleavedTwoHostsPickHierForLargeAllreduce) {
  auto rows = ExplainPlan(Make(2, 4, /*interleave=*/true));
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  const PlanRow* big = Row(*rows, "allreduce", 64u << 20);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->algorithm, "hier");
  EXPECT_NE(big->why.find("ring"), std::string::npos) << big->why;  // the comparison is shown
  EXPECT_EQ(Row(*rows, "reduce_scatter", 64u << 20)->algorithm, "hier");
  EXPECT_EQ(Row(*rows, "allgather", 64u << 20)->algorithm, "hier");
  EXPECT_EQ(Row(*rows, "broadcast", 64u << 20)->algorithm, "hier");
  EXPECT_GT(big->predicted_seconds_at_min, 0);
}

TEST(PlanTest, OneHostUsesTheSharedArea) {
  params::ScopedOverride tuning("CHOIR_SHM_TUNING", "intel");
  auto rows = ExplainPlan(Make(1, 4, false));
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(Row(*rows, "allreduce", 8)->algorithm, "shm_flat");
  // Beyond a few KiB single copy beats copying through the slots.
  EXPECT_EQ(Row(*rows, "allreduce", 4u << 10)->algorithm, "shm_flat");
  EXPECT_EQ(Row(*rows, "allreduce", 64u << 10)->algorithm, "cma");
  EXPECT_EQ(Row(*rows, "allreduce", 1u << 20)->algorithm, "cma");
  EXPECT_EQ(Row(*rows, "allreduce", 64u << 20)->algorithm, "shm_pipe");
  EXPECT_EQ(Row(*rows, "reduce_scatter", 1u << 20)->algorithm, "cma");
  EXPECT_EQ(Row(*rows, "reduce_scatter", 64u << 20)->algorithm, "shm_pipe");
  // Ranks stacked on one core: the pipe from 1 MiB.
  Topology stacked = Make(1, 4, false);
  for (RankPlace& p : stacked.ranks) p.cores = {0};
  auto shared = ExplainPlan(stacked);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(Row(*shared, "allreduce", 1u << 20)->algorithm, "shm_pipe");
  EXPECT_EQ(Row(*shared, "allreduce", 512u << 10)->algorithm, "cma");
}

TEST(PlanTest, AmdSwitchPointsPreferThePipe) {
  params::ScopedOverride tuning("CHOIR_SHM_TUNING", "amd");
  auto rows = ExplainPlan(Make(1, 4, false));
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(Row(*rows, "allreduce", 8)->algorithm, "shm_flat");
  EXPECT_EQ(Row(*rows, "allreduce", 64u << 10)->algorithm, "shm_pipe");
  EXPECT_EQ(Row(*rows, "reduce_scatter", 64u << 20)->algorithm, "shm_pipe");
  EXPECT_EQ(Row(*rows, "broadcast", 1u << 20)->algorithm, "cma");
  EXPECT_NE(Row(*rows, "allreduce", 64u << 10)->why.find("amd"), std::string::npos)
      << Row(*rows, "allreduce", 64u << 10)->why;
}

TEST(PlanTest, OneRankPerHostHasNoHierarchy) {
  auto rows = ExplainPlan(Make(4, 1, false));
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(Row(*rows, "allreduce", 64u << 20)->algorithm, "ring");
  EXPECT_EQ(Row(*rows, "allreduce", 8)->algorithm, "recursive_doubling");
}

TEST(PlanTest, RankOnNoHostIsAnError) {
  Topology t = Make(2, 2, false);
  t.world_size = 5;
  EXPECT_FALSE(ExplainPlan(t).ok());
}

// Two ranks on one host with single copy allowed and the default slots and pipe.
algorithms::GroupView TwoRanksOneHost() {
  algorithms::GroupView g;
  g.size = 2;
  g.same_host = true;
  g.cma = true;
  g.slot_bytes = 64 << 10;
  g.pipe_bytes = 4 << 20;
  return g;
}

algorithms::OpArgs Float32Args(algorithms::CollKind kind) {
  algorithms::OpArgs a;
  a.kind = kind;
  a.dtype = DataType::kFloat32;
  return a;
}

// The algorithm SameHostChoice picks for `bytes` of the whole buffer (the
// count of allgather, reduce_scatter and alltoall is that of one rank's
// block), or "generic" when none of the same-host ones should run it.
std::string Choice(const algorithms::GroupView& g, algorithms::CollKind kind, uint64_t bytes) {
  algorithms::OpArgs a = Float32Args(kind);
  const bool blocks = kind == algorithms::CollKind::kAllgather || kind == algorithms::CollKind::kReduceScatter ||
                      kind == algorithms::CollKind::kAlltoall;
  a.count = static_cast<size_t>(bytes / 4 / (blocks ? static_cast<uint64_t>(g.size) : 1));
  const algorithms::Algorithm* algo = algorithms::SameHostChoice(g, a);
  return algo == nullptr ? "generic" : algo->name;
}

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// The Intel table: shm_pipe takes over from cma later when every rank has a
// core (16 MiB allreduce, 64 MiB allgather, 32 MiB reduce_scatter), earlier
// when the ranks share cores (1, 4 and 4 MiB); alltoall stays with cma;
// without single copy the pipe runs everything past the slots.
TEST(SwitchPointsTest, IntelPipeTakesOverFromCmaPerCollective) {
  algorithms::GroupView g = TwoRanksOneHost();
  for (const bool shared : {false, true}) {
    g.shares_cpus = shared;
    SCOPED_TRACE(shared ? "ranks share cores" : "a core per rank");
    const uint64_t allreduce = shared ? 1 * kMiB : 16 * kMiB;
    const uint64_t allgather = shared ? 4 * kMiB : 64 * kMiB;
    const uint64_t reduce_scatter = shared ? 4 * kMiB : 32 * kMiB;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, allreduce - 64), "cma");
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, allreduce), "shm_pipe");
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, allgather - 128), "cma");
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, allgather), "shm_pipe");
    EXPECT_EQ(Choice(g, algorithms::CollKind::kReduceScatter, reduce_scatter - 128), "cma");
    EXPECT_EQ(Choice(g, algorithms::CollKind::kReduceScatter, reduce_scatter), "shm_pipe");
    EXPECT_EQ(Choice(g, algorithms::CollKind::kReduceScatter, 256 * kMiB), "shm_pipe");
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, 256 * kMiB), "cma");
  }
  g.cma = false;
  g.shares_cpus = false;
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, 256 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, 256 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 256 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduceScatter, 256 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kBroadcast, 256 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 256 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kGather, 256 * kKiB), "generic");
}

// cma's reduce: combining costs 1.2 of a copy between processes on the
// Intel table with the kernel copying (measured again there), 0.2 through
// SharedBuffers' mappings and on the AMD tables.
TEST(SwitchPointsTest, CmaReduceCombineCostPerTable) {
  EXPECT_EQ(algorithms::CmaReduceCombineCost(algorithms::SwitchTable::kIntel, false), 1.2);
  EXPECT_EQ(algorithms::CmaReduceCombineCost(algorithms::SwitchTable::kIntel, true), 0.2);
  for (const auto table : {algorithms::SwitchTable::kAmd, algorithms::SwitchTable::kAmdZen4,
                           algorithms::SwitchTable::kAmdZen5}) {
    for (const bool shared : {false, true}) EXPECT_EQ(algorithms::CmaReduceCombineCost(table, shared), 0.2);
  }
}

struct FlatWant {
  algorithms::CollKind kind;
  uint64_t own_cores, shared_cores;  // largest slot payload on the slots
};

// The slots take payloads up to `wants`' limits, and not 64 bytes more.
void ExpectFlatLimits(algorithms::GroupView g, const std::vector<FlatWant>& wants) {
  for (const bool shared : {false, true}) {
    g.shares_cpus = shared;
    for (const FlatWant& w : wants) {
      const uint64_t limit = shared ? w.shared_cores : w.own_cores;
      const uint64_t per_payload = w.kind == algorithms::CollKind::kAllgather ? static_cast<uint64_t>(g.size) : 1;
      SCOPED_TRACE(std::string(algorithms::CollKindName(w.kind)) + (shared ? ", shared cores" : ", own cores") +
                   ", limit " + std::to_string(limit));
      EXPECT_EQ(Choice(g, w.kind, limit * per_payload), "shm_flat");
      EXPECT_NE(Choice(g, w.kind, (limit + 64) * per_payload), "shm_flat");
    }
  }
}

// The Intel table: where shm_flat hands over to cma with single copy
// allowed, per collective, later when the ranks share cores, never beyond
// the slots; without single copy the slots hold what fits.
TEST(SwitchPointsTest, IntelFlatLimitsPerCollective) {
  algorithms::GroupView g = TwoRanksOneHost();
  ExpectFlatLimits(g, {{algorithms::CollKind::kAllreduce, 16 * kKiB, 32 * kKiB},
                       {algorithms::CollKind::kReduceScatter, 16 * kKiB, 32 * kKiB},
                       {algorithms::CollKind::kBroadcast, 32 * kKiB, 64 * kKiB},  // 128 KiB, but the slots hold 64
                       {algorithms::CollKind::kReduce, 64 * kKiB, 64 * kKiB},
                       {algorithms::CollKind::kAlltoall, 16 * kKiB, 32 * kKiB},
                       {algorithms::CollKind::kAllgather, 16 * kKiB, 16 * kKiB}});
  g.cma = false;
  ExpectFlatLimits(g, {{algorithms::CollKind::kAllreduce, 64 * kKiB, 64 * kKiB},
                       {algorithms::CollKind::kReduce, 64 * kKiB, 64 * kKiB}});
}

// The slot limits of both AMD tables (Zen 3 and Zen 4), with a core per
// rank and with shared cores.
const std::vector<FlatWant> kAmdFlatLimits = {{algorithms::CollKind::kAllreduce, 16 * kKiB, 32 * kKiB},
                                              {algorithms::CollKind::kReduceScatter, 64 * kKiB, 16 * kKiB},
                                              {algorithms::CollKind::kAllgather, 64 * kKiB, 8 * kKiB},
                                              {algorithms::CollKind::kBroadcast, 32 * kKiB, 64 * kKiB},
                                              {algorithms::CollKind::kReduce, 32 * kKiB, 32 * kKiB},
                                              {algorithms::CollKind::kAlltoall, 32 * kKiB, 32 * kKiB}};

// The AMD table: the pipe before cma at every size for the collectives that
// have one (broadcast with a core per rank from 16 MiB), the slots to their
// own limits whether or not single copy is allowed; reduce and alltoall keep
// them to 32 KiB.
TEST(SwitchPointsTest, AmdPrefersThePipeAndLongerSlots) {
  algorithms::GroupView g = TwoRanksOneHost();
  g.switch_table = algorithms::SwitchTable::kAmd;
  ExpectFlatLimits(g, kAmdFlatLimits);
  for (const bool shared : {false, true}) {
    g.shares_cpus = shared;
    SCOPED_TRACE(shared ? "ranks share cores" : "a core per rank");
    for (const uint64_t bytes : {256 * kKiB, 1 * kMiB, 16 * kMiB, 256 * kMiB}) {
      EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, bytes), "shm_pipe") << bytes;
      EXPECT_EQ(Choice(g, algorithms::CollKind::kReduceScatter, bytes), "shm_pipe") << bytes;
      EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, bytes), "shm_pipe") << bytes;
      EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, bytes), "shm_pipe") << bytes;
      // Broadcast: cma before the pipe below 16 MiB with a core per rank.
      EXPECT_EQ(Choice(g, algorithms::CollKind::kBroadcast, bytes),
                shared || bytes >= 16 * kMiB ? "shm_pipe" : "cma") << bytes;
      EXPECT_EQ(Choice(g, algorithms::CollKind::kBroadcast, 16 * kMiB - 64), shared ? "shm_pipe" : "cma");
      EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, bytes), "shm_pipe") << bytes;
    }
  }
  // Without single copy the same flat limits for the collectives with a
  // pipe; gather (none) keeps the slots as far as they hold.
  g.cma = false;
  g.shares_cpus = false;
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, 16 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, 32 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 32 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 64 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kGather, 64 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kGather, 128 * kKiB), "generic");
  // Without the pipe (CHOIR_SHM_PIPE_BYTES=0) and without single copy the
  // slots keep what they hold, past the table's limit.
  g.pipe_bytes = 0;
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, 32 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, 64 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, 128 * kKiB), "generic");
  // With single copy, a pipe that cannot carry the blocks leaves them to cma.
  g.cma = true;
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, 32 * kKiB), "cma");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, 1 * kMiB), "cma");
}

// The AMD Zen 4 table: the Zen 3 one, but with a core per rank allgather
// takes cma from blocks past 16 KiB to 512 KiB of buffer, alltoall to 1 MiB
// and reduce to 512 KiB, and the slots hold reduce to 64 KiB; with ranks
// sharing cores, or without single copy, the pipe as on Zen 3 (allgather:
// the slots to 64 KiB blocks without single copy).
TEST(SwitchPointsTest, AmdZen4TakesCmaForMidSizeAllgatherAlltoallAndReduce) {
  algorithms::GroupView g = TwoRanksOneHost();
  g.switch_table = algorithms::SwitchTable::kAmdZen4;
  std::vector<FlatWant> zen4_limits = kAmdFlatLimits;
  for (FlatWant& w : zen4_limits) {
    if (w.kind == algorithms::CollKind::kReduce) w.own_cores = 64 * kKiB;
    if (w.kind == algorithms::CollKind::kAllgather) w.own_cores = 16 * kKiB;
  }
  ExpectFlatLimits(g, zen4_limits);
  g.shares_cpus = false;
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 64 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 64 * kKiB + 64), "cma");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 512 * kKiB - 64), "cma");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 512 * kKiB), "shm_pipe");
  // Allgather: the slots hold 16 KiB blocks (32 KiB of buffer with 2 ranks).
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 32 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 32 * kKiB + 128), "cma");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 128 * kKiB), "cma");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 512 * kKiB - 128), "cma");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 512 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 1 * kMiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 4 * kMiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, 32 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, 64 * kKiB), "cma");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, 1 * kMiB - 128), "cma");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, 1 * kMiB), "shm_pipe");
  for (const uint64_t bytes : {16 * kMiB, 256 * kMiB}) {
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, bytes), "shm_pipe") << bytes;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, bytes), "shm_pipe") << bytes;
  }
  for (const uint64_t bytes : {256 * kKiB, 1 * kMiB, 16 * kMiB, 256 * kMiB}) {
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, bytes), "shm_pipe") << bytes;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kReduceScatter, bytes), "shm_pipe") << bytes;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, bytes), bytes >= 512 * kKiB ? "shm_pipe" : "cma") << bytes;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kBroadcast, bytes), bytes >= 16 * kMiB ? "shm_pipe" : "cma") << bytes;
  }
  g.shares_cpus = true;
  for (const uint64_t bytes : {256 * kKiB, 1 * kMiB, 4 * kMiB}) {
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, bytes), "shm_pipe") << bytes;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, bytes), "shm_pipe") << bytes;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, bytes), "shm_pipe") << bytes;
  }
  g.shares_cpus = false;
  g.cma = false;
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 1 * kMiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, 256 * kKiB), "shm_pipe");
  // Without single copy reduce keeps the slots' 64 KiB and the pipe past
  // them, and allgather the slots' 64 KiB blocks.
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 64 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 128 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 128 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 128 * kKiB + 128), "shm_pipe");
}

// The AMD Zen 5 table: with a core per rank the slots take all six
// measured collectives up to 64 KiB of payload (what they hold), then the
// pipe (broadcast: cma below 16 MiB); gather keeps the Intel limit; with
// ranks sharing cores, the Zen 3 limits. The pipe's staging starts with
// streaming stores there, and only there.
TEST(SwitchPointsTest, AmdZen5HoldsTheSlotsTo64KiBAndStagesStreamingFirst) {
  algorithms::GroupView g = TwoRanksOneHost();
  g.switch_table = algorithms::SwitchTable::kAmdZen5;
  std::vector<FlatWant> zen5_limits = kAmdFlatLimits;
  for (FlatWant& w : zen5_limits) w.own_cores = 64 * kKiB;
  ExpectFlatLimits(g, zen5_limits);
  g.shares_cpus = false;
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 128 * kKiB), "shm_flat");  // 64 KiB blocks
  EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, 128 * kKiB + 128), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kBroadcast, 64 * kKiB + 64), "cma");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kGather, 16 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kGather, 32 * kKiB), "cma");
  for (const uint64_t bytes : {128 * kKiB, 1 * kMiB, 16 * kMiB, 256 * kMiB}) {
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, bytes), "shm_pipe") << bytes;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kReduceScatter, bytes), "shm_pipe") << bytes;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAlltoall, bytes), "shm_pipe") << bytes;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, bytes), "shm_pipe") << bytes;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kBroadcast, bytes), bytes >= 16 * kMiB ? "shm_pipe" : "cma") << bytes;
  }
  for (const uint64_t bytes : {1 * kMiB, 16 * kMiB, 256 * kMiB}) {
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllgather, bytes), "shm_pipe") << bytes;
  }
  // Without single copy the slots keep the same limits, the pipe the rest.
  g.cma = false;
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 64 * kKiB), "shm_flat");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kReduce, 128 * kKiB), "shm_pipe");
  EXPECT_EQ(Choice(g, algorithms::CollKind::kBroadcast, 1 * kMiB), "shm_pipe");

  using algorithms::SwitchTable;
  EXPECT_TRUE(algorithms::StagingStreamsFirst(SwitchTable::kAmdZen5, false));
  EXPECT_FALSE(algorithms::StagingStreamsFirst(SwitchTable::kAmdZen5, true));
  for (const auto table : {SwitchTable::kIntel, SwitchTable::kAmd, SwitchTable::kAmdZen4}) {
    for (const bool shared : {false, true}) EXPECT_FALSE(algorithms::StagingStreamsFirst(table, shared));
  }
  EXPECT_EQ(algorithms::CmaPushMaxBytes(SwitchTable::kAmdZen5, false), 512 * kKiB);
  EXPECT_EQ(algorithms::CmaPushMaxBytes(SwitchTable::kAmdZen5, true), 4 * kMiB);
  // Allreduces in flagged lines: up to 512 bytes on the Intel table and
  // wherever ranks share cores, up to AreaOp::kLinesMaxBytes (1 KiB) on the
  // AMD ones with a core per rank.
  // And a reduce_scatter's blocks: up to 3 lines on the Intel table, 5 on
  // the AMD ones (the most AreaOp::BlockLinesFit takes).
  EXPECT_EQ(algorithms::AllreduceLinesMaxBytes(SwitchTable::kIntel, false), 512u);
  EXPECT_EQ(algorithms::AllreduceLinesMaxBytes(SwitchTable::kIntel, true), 512u);
  EXPECT_EQ(algorithms::ReduceScatterLinesMaxBlock(SwitchTable::kIntel), 3 * algorithms::AreaOp::kLinePayload);
  for (const auto table : {SwitchTable::kAmd, SwitchTable::kAmdZen4, SwitchTable::kAmdZen5}) {
    EXPECT_EQ(algorithms::AllreduceLinesMaxBytes(table, false), algorithms::AreaOp::kLinesMaxBytes);
    EXPECT_EQ(algorithms::AllreduceLinesMaxBytes(table, true), 512u);
    EXPECT_EQ(algorithms::ReduceScatterLinesMaxBlock(table), 5 * algorithms::AreaOp::kLinePayload);
  }
  EXPECT_TRUE(algorithms::AreaOp::BlockLinesFit(5 * algorithms::AreaOp::kLinePayload, 2));
  EXPECT_FALSE(algorithms::AreaOp::BlockLinesFit(5 * algorithms::AreaOp::kLinePayload + 1, 2));
}

// Zen 5 is family 26 (0x1a), whatever the model; Zen 3 and 4 (family 25)
// and other families are not.
TEST(SwitchPointsTest, Zen5IsFamily26) {
  for (const int model : {0x00, 0x02, 0x11, 0x24, 0x44, 0x70}) EXPECT_TRUE(algorithms::IsZen5({0x1a, model})) << model;
  EXPECT_FALSE(algorithms::IsZen5({0x19, 0x11}));  // Zen 4
  EXPECT_FALSE(algorithms::IsZen5({0x19, 0x01}));  // Zen 3
  EXPECT_FALSE(algorithms::IsZen5({0x17, 0x31}));  // Zen 2
  EXPECT_FALSE(algorithms::IsZen5({0x06, 0x1a}));  // an Intel family and model
}

// cma's allgather pushes blocks under 4 MiB on the Intel table and
// wherever ranks share cores; with a core per rank its peers read them from
// 1 MiB on the Zen 4 table and from 512 KiB on the amd one.
TEST(SwitchPointsTest, CmaPushesAllgatherBlocksUpToTheTablesLimit) {
  using algorithms::SwitchTable;
  for (const bool shared : {false, true}) {
    EXPECT_EQ(algorithms::CmaPushMaxBytes(SwitchTable::kIntel, shared), 4 * kMiB);
  }
  EXPECT_EQ(algorithms::CmaPushMaxBytes(SwitchTable::kAmd, false), 512 * kKiB);
  EXPECT_EQ(algorithms::CmaPushMaxBytes(SwitchTable::kAmd, true), 4 * kMiB);
  EXPECT_EQ(algorithms::CmaPushMaxBytes(SwitchTable::kAmdZen4, false), 1 * kMiB);
  EXPECT_EQ(algorithms::CmaPushMaxBytes(SwitchTable::kAmdZen4, true), 4 * kMiB);
}

// The pipe's walks write their outputs with streaming stores from 4 MiB of
// buffer, but from 8 MiB for reduce_scatter, allgather and alltoall on the
// Zen 4 table with a core per rank.
TEST(SwitchPointsTest, PipeStreamsOutputsFromTheTablesSize) {
  using algorithms::CollKind;
  using algorithms::SwitchTable;
  const CollKind later[] = {CollKind::kReduceScatter, CollKind::kAllgather, CollKind::kAlltoall};
  const CollKind kept[] = {CollKind::kAllreduce, CollKind::kReduce, CollKind::kBroadcast};
  for (const CollKind kind : later) {
    EXPECT_EQ(algorithms::PipeStreamingBytes(SwitchTable::kAmdZen4, kind, false), 8 * kMiB);
    EXPECT_EQ(algorithms::PipeStreamingBytes(SwitchTable::kAmdZen4, kind, true), 4 * kMiB);
  }
  for (const CollKind kind : kept) {
    EXPECT_EQ(algorithms::PipeStreamingBytes(SwitchTable::kAmdZen4, kind, false), 4 * kMiB);
  }
  for (const SwitchTable table : {SwitchTable::kIntel, SwitchTable::kAmd, SwitchTable::kAmdZen5}) {
    for (const bool shared : {false, true}) {
      for (const CollKind kind : later) EXPECT_EQ(algorithms::PipeStreamingBytes(table, kind, shared), 4 * kMiB);
      for (const CollKind kind : kept) EXPECT_EQ(algorithms::PipeStreamingBytes(table, kind, shared), 4 * kMiB);
    }
  }
}

// The Zen 4 model ranges of family 25 (0x10-0x1f, 0x60-0xaf); Zen 3
// (models 0x00-0x0f, 0x20-0x5f) and other families are not.
TEST(SwitchPointsTest, Zen4IsFamily25ModelsOfThatGeneration) {
  for (const int model : {0x10, 0x11, 0x1f, 0x60, 0x61, 0x74, 0x90, 0xa0, 0xaf}) {
    EXPECT_TRUE(algorithms::IsZen4({0x19, model})) << model;
  }
  for (const int model : {0x00, 0x01, 0x0f, 0x20, 0x21, 0x44, 0x50, 0x5f, 0xb0}) {
    EXPECT_FALSE(algorithms::IsZen4({0x19, model})) << model;
  }
  EXPECT_FALSE(algorithms::IsZen4({0x17, 0x31}));  // Zen 2
  EXPECT_FALSE(algorithms::IsZen4({0x1a, 0x11}));  // Zen 5
  EXPECT_FALSE(algorithms::IsZen4({0x06, 0xcf}));  // an Intel model number
}

// The pipe's chunks are its share (4 MiB pipe, 2 ranks: 1 MiB), bounded by
// the L2 cache the host's ranks agreed on (512 KiB: 128 KiB chunks), seen
// through the largest block a walk can count (2^23 - 2 steps).
TEST(SwitchPointsTest, PipeChunksFollowTheAgreedCache) {
  constexpr size_t kMaxSteps = (size_t{1} << 23) - 2;
  constexpr size_t kPipe = 4 << 20;
  auto fits = [&](size_t cache, size_t chunk_bytes, size_t extra) {
    return algorithms::PipeFits(kPipe, cache, 2, 4, kMaxSteps * (chunk_bytes / 4) + extra);
  };
  for (const auto& [cache, chunk] : {std::pair<size_t, size_t>{512 << 10, 128 << 10}, {2 << 20, 512 << 10},
                                     {0, 1 << 20}, {8 << 20, 1 << 20}}) {
    SCOPED_TRACE("cache " + std::to_string(cache));
    EXPECT_TRUE(fits(cache, chunk, 0));
    EXPECT_FALSE(fits(cache, chunk, 1));
  }
  // A pipe too small for one 64-byte chunk per part carries nothing.
  EXPECT_FALSE(algorithms::PipeFits(64, 512 << 10, 2, 4, 100));
}

// A reduce_scatter that stages only its peers' chunks gives them the L2
// share of n-1 chunks (2 ranks, 1 MiB of L2: 512 KiB, against 256 KiB for
// the n chunks of the other reduce walks), still bounded by the pipe, which
// holds n chunks a step: a 1 MiB pipe leaves 256 KiB to either rule.
TEST(SwitchPointsTest, ReduceChunksCountWhatAStepStages) {
  constexpr size_t kMiB = 1 << 20;
  EXPECT_EQ(algorithms::PipeChunkElems(4 * kMiB, kMiB, 2, 4, /*peers_only=*/false), (256u << 10) / 4);
  EXPECT_EQ(algorithms::PipeChunkElems(4 * kMiB, kMiB, 2, 4, /*peers_only=*/true), (512u << 10) / 4);
  EXPECT_EQ(algorithms::PipeChunkElems(4 * kMiB, kMiB, 2, 2, /*peers_only=*/true), (512u << 10) / 2);
  // 4 ranks: L2 / 8 against L2 / 6, rounded down to whole lines.
  EXPECT_EQ(algorithms::PipeChunkElems(4 * kMiB, kMiB, 4, 4, false), (128u << 10) / 4);
  EXPECT_EQ(algorithms::PipeChunkElems(4 * kMiB, kMiB, 4, 4, true), (kMiB / 6 / 64 * 64) / 4);
  EXPECT_EQ(algorithms::PipeChunkElems(kMiB, kMiB, 2, 4, true), (256u << 10) / 4);
  // No cache agreed on: the pipe's share alone.
  EXPECT_EQ(algorithms::PipeChunkElems(4 * kMiB, 0, 2, 4, true), kMiB / 4);
  // One rank stages nothing for anyone: the ordinary rule.
  EXPECT_EQ(algorithms::PipeChunkElems(4 * kMiB, kMiB, 1, 4, true),
            algorithms::PipeChunkElems(4 * kMiB, kMiB, 1, 4, false));
}

TEST(SwitchPointsTest, NotOneHostIsNotChosenHere) {
  algorithms::GroupView g = TwoRanksOneHost();
  g.same_host = false;
  for (const auto table : {algorithms::SwitchTable::kIntel, algorithms::SwitchTable::kAmd,
                           algorithms::SwitchTable::kAmdZen4, algorithms::SwitchTable::kAmdZen5}) {
    g.switch_table = table;
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, 8), "generic");
    EXPECT_EQ(Choice(g, algorithms::CollKind::kAllreduce, 64 * kMiB), "generic");
  }
}

// CHOIR_SHM_TUNING's values: intel, amd, amd-zen4 and amd-zen5 name their
// tables, auto follows the CPU's maker, family and model (the Intel table
// for anything but AMD, the Zen 4 one on Zen 4, the Zen 5 one on Zen 5, the
// amd one on every other AMD CPU).
TEST(SwitchPointsTest, SettingNamesATableOrFollowsTheCpu) {
  for (const auto table : {algorithms::SwitchTable::kIntel, algorithms::SwitchTable::kAmd,
                           algorithms::SwitchTable::kAmdZen4, algorithms::SwitchTable::kAmdZen5}) {
    EXPECT_EQ(algorithms::ParseSwitchTable(algorithms::SwitchTableName(table)), table);
    EXPECT_EQ(algorithms::SwitchTableFor(algorithms::SwitchTableName(table)), table);
  }
  EXPECT_STREQ(algorithms::SwitchTableName(algorithms::SwitchTable::kAmdZen4), "amd-zen4");
  EXPECT_STREQ(algorithms::SwitchTableName(algorithms::SwitchTable::kAmdZen5), "amd-zen5");
  EXPECT_FALSE(algorithms::ParseSwitchTable("auto").has_value());
  EXPECT_FALSE(algorithms::ParseSwitchTable("AMD").has_value());
  EXPECT_FALSE(algorithms::ParseSwitchTable("zen4").has_value());
  auto here = algorithms::SwitchTable::kIntel;
  if (topology::HostCpuVendor() == topology::CpuVendor::kAmd) {
    const topology::CpuModel cpu = topology::HostCpuModel();
    here = algorithms::IsZen4(cpu)   ? algorithms::SwitchTable::kAmdZen4
           : algorithms::IsZen5(cpu) ? algorithms::SwitchTable::kAmdZen5
                                     : algorithms::SwitchTable::kAmd;
  }
  EXPECT_EQ(algorithms::SwitchTableFor("auto"), here);
}

}  // namespace
}  // namespace choir
