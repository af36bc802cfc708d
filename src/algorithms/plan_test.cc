// The plan `choir topo` prints: hierarchical algorithms win across hosts, the
// shared area on one host, and the field's interleaved ring is predicted slow.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace choir
