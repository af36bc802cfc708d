// The plan `choir topo` prints: hierarchical algorithms win across hosts, the
// shared area on one host, and the field's interleaved ring is predicted slow.
#include <gtest/gtest.h>

#include "algorithms/algorithms.h"
#include "algorithms/local_ops.h"
#include "choir/topology.h"

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
  auto rows = ExplainPlan(Make(1, 4, false));
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(Row(*rows, "allreduce", 8)->algorithm, "shm_flat");
  // Beyond a few KiB single copy beats copying through the slots.
  EXPECT_EQ(Row(*rows, "allreduce", 4u << 10)->algorithm, "shm_flat");
  EXPECT_EQ(Row(*rows, "allreduce", 64u << 10)->algorithm, "cma");
  EXPECT_EQ(Row(*rows, "allreduce", 1u << 20)->algorithm, "cma");
  EXPECT_EQ(Row(*rows, "allreduce", 64u << 20)->algorithm, "shm_pipe");
  EXPECT_EQ(Row(*rows, "reduce_scatter", 64u << 20)->algorithm, "cma");
  // Ranks stacked on one core: the pipe from 1 MiB.
  Topology stacked = Make(1, 4, false);
  for (RankPlace& p : stacked.ranks) p.cores = {0};
  auto shared = ExplainPlan(stacked);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(Row(*shared, "allreduce", 1u << 20)->algorithm, "shm_pipe");
  EXPECT_EQ(Row(*shared, "allreduce", 512u << 10)->algorithm, "cma");
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

// Where shm_pipe takes over from cma on one host with single copy allowed:
// later when every rank has a core (16 MiB allreduce, 64 MiB allgather),
// earlier when the ranks share cores (1 and 4 MiB); without single copy,
// from the first size above the slots.
TEST(PipeThresholdTest, DependsOnTheCollectiveAndOnSharedCores) {
  algorithms::GroupView g = TwoRanksOneHost();
  auto usable = [&](algorithms::CollKind kind, uint64_t bytes) {
    algorithms::OpArgs a = Float32Args(kind);
    a.count = static_cast<size_t>(bytes / 4 / (kind == algorithms::CollKind::kAllgather ? 2 : 1));
    return algorithms::PipeUsable(g, a);
  };
  constexpr uint64_t kMiB = 1 << 20;
  for (const bool shared : {false, true}) {
    g.shares_cpus = shared;
    SCOPED_TRACE(shared ? "ranks share cores" : "a core per rank");
    const uint64_t allreduce = shared ? 1 * kMiB : 16 * kMiB;
    const uint64_t allgather = shared ? 4 * kMiB : 64 * kMiB;
    EXPECT_EQ(algorithms::PipeMinBytesWithCma(algorithms::CollKind::kAllreduce, shared), allreduce);
    EXPECT_EQ(algorithms::PipeMinBytesWithCma(algorithms::CollKind::kAllgather, shared), allgather);
    EXPECT_FALSE(usable(algorithms::CollKind::kAllreduce, allreduce - 64));
    EXPECT_TRUE(usable(algorithms::CollKind::kAllreduce, allreduce));
    EXPECT_FALSE(usable(algorithms::CollKind::kAllgather, allgather - 64));
    EXPECT_TRUE(usable(algorithms::CollKind::kAllgather, allgather));
  }
  g.cma = false;
  EXPECT_TRUE(usable(algorithms::CollKind::kAllreduce, 256 << 10));
  EXPECT_TRUE(usable(algorithms::CollKind::kAllgather, 256 << 10));
}

// Where shm_flat hands over to cma with single copy allowed: per
// collective, later when the ranks share cores, never beyond the slots.
TEST(FlatThresholdTest, DependsOnTheCollectiveAndOnSharedCores) {
  algorithms::GroupView g = TwoRanksOneHost();
  auto usable = [&](algorithms::CollKind kind, uint64_t bytes) {
    algorithms::OpArgs a = Float32Args(kind);
    a.count = static_cast<size_t>(bytes / 4);
    return algorithms::FlatUsable(g, a);
  };
  constexpr uint64_t kKiB = 1024;
  struct Want {
    algorithms::CollKind kind;
    uint64_t own_cores, shared_cores;  // largest slot payload on the slots
  };
  const Want wants[] = {
      {algorithms::CollKind::kAllreduce, 16 * kKiB, 32 * kKiB},
      {algorithms::CollKind::kBroadcast, 32 * kKiB, 64 * kKiB},  // 128 KiB, but the slots hold 64
      {algorithms::CollKind::kReduce, 32 * kKiB, 64 * kKiB},
      {algorithms::CollKind::kAllgather, 16 * kKiB, 16 * kKiB},
  };
  for (const bool shared : {false, true}) {
    g.shares_cpus = shared;
    for (const Want& w : wants) {
      const uint64_t limit = shared ? w.shared_cores : w.own_cores;
      SCOPED_TRACE(std::string(algorithms::CollKindName(w.kind)) + (shared ? ", shared cores" : ", own cores"));
      EXPECT_TRUE(usable(w.kind, limit));
      EXPECT_FALSE(usable(w.kind, limit + 4));
    }
  }
  g.cma = false;
  g.shares_cpus = false;
  EXPECT_TRUE(usable(algorithms::CollKind::kAllreduce, 64 * kKiB));
  EXPECT_FALSE(usable(algorithms::CollKind::kAllreduce, 64 * kKiB + 4));
}

}  // namespace
}  // namespace choir
