// Hierarchical algorithms on emulated hosts (ranks as threads with distinct
// host ids: shared memory inside a "host", TCP between them), against the
// reference values of the sweep, for the host shapes the topology issue names.
#include <gtest/gtest.h>

#include "choir/selftest.h"
#include "testing/multi_rank.h"

namespace choir {
namespace {

struct Shape {
  std::vector<std::string> hosts;  // host id of each rank
  std::string name;
};

class HierTest : public ::testing::TestWithParam<Shape> {};

TEST_P(HierTest, SweepMatchesReferenceAndUsesHier) {
  const Shape& shape = GetParam();
  const int n = static_cast<int>(shape.hosts.size());
  SweepOptions so;
  so.ops = {"allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall", "barrier"};
  so.counts = {0, 1, 7, 1000, 70001};
  so.dtypes = {DataType::kFloat32, DataType::kInt32, DataType::kBFloat16};
  auto results = testing::RunRanks(
      n,
      [&](Communicator& comm) -> Status {
        auto cases = RunSweep(comm, so);
        if (!cases.ok()) return cases.status();
        bool used_hier = false;
        for (const auto& c : *cases) {
          if (!c.ok) {
            return Status(Code::kInternal, c.op + " " + c.dtype + " " + c.reduce_op + " count " +
                                               std::to_string(c.count) + (c.in_place ? " in place" : "") +
                                               " [" + c.algorithm + "]: " + c.error);
          }
          used_hier |= c.algorithm == "hier";
        }
        return used_hier ? Status::Ok() : Status(Code::kInternal, "hier was never selected");
      },
      [&](int r) {
        CommOptions o;
        o.host_id = shape.hosts[static_cast<size_t>(r)];
        o.timeout = std::chrono::seconds(60);
        return o;
      });
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].create.ok()) << "rank " << r << ": " << results[r].create.ToString();
    EXPECT_TRUE(results[r].run.ok()) << "rank " << r << ": " << results[r].run.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HierTest,
    ::testing::Values(Shape{{"a", "a", "b", "b"}, "2x2"}, Shape{{"a", "a", "b", "b", "c", "c"}, "3x2"},
                      Shape{{"a", "a", "a", "b", "b", "b"}, "2x3"}, Shape{{"a", "b", "a", "b"}, "2x2_interleaved"},
                      Shape{{"a", "a", "b"}, "uneven_2_1"}, Shape{{"a", "a", "a", "b", "b"}, "uneven_3_2"}),
    [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace choir
