#include "diag/metrics.h"

#include <gtest/gtest.h>

#include "choir/metrics.h"
#include "testing/multi_rank.h"

namespace choir {
namespace {

bool Has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

TEST(MetricsTest, CountsOperationsBytesAlgorithmsAndPeers) {
  std::string rendered;
  std::mutex mu;
  CommOptions o;
  o.job_id = "metrics-job";
  o.name = testing::UniqueName("metrics");
  o.transport = "tcp";
  auto results = testing::RunRanks(2, [&](Communicator& comm) -> Status {
    std::vector<float> v(1000, 1.0f);
    for (int i = 0; i < 3; ++i) {
      CHOIR_RETURN_IF_ERROR(comm.Allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).Wait());
    }
    CHOIR_RETURN_IF_ERROR(comm.Barrier().Wait());
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      rendered = RenderMetrics();
    }
    return comm.Barrier().Wait();
  }, o);
  for (const auto& r : results) ASSERT_TRUE(r.create.ok() && r.run.ok()) << r.create.ToString() << r.run.ToString();
  const std::string labels = "job=\"metrics-job\",comm=\"" + o.name + "#0\",rank=\"0\",size=\"2\"";
  EXPECT_TRUE(Has(rendered, "# TYPE choir_collectives_total counter")) << rendered;
  EXPECT_TRUE(Has(rendered, "choir_collectives_total{" + labels + ",op=\"allreduce\",status=\"ok\"} 3")) << rendered;
  EXPECT_TRUE(Has(rendered, "choir_collective_bytes_total{" + labels + ",op=\"allreduce\"} 12000")) << rendered;
  EXPECT_TRUE(Has(rendered, "choir_collective_duration_seconds_count{" + labels + ",op=\"allreduce\",size_class=\"le4KiB\"} 3"));
  EXPECT_TRUE(Has(rendered, "le=\"+Inf\"} 3"));
  EXPECT_TRUE(Has(rendered, "choir_algorithm_selections_total{" + labels + ",op=\"allreduce\",algorithm=\"recursive_doubling\"} 3"));
  EXPECT_TRUE(Has(rendered, "choir_peer_bytes_sent_total{" + labels + ",peer=\"1\"}"));
  EXPECT_TRUE(Has(rendered, "choir_transport_bytes_sent_total{" + labels + ",transport=\"tcp\"} 12000")) << rendered;
}

// Runs `ops` on 2 ranks over shared memory: rank 0's metrics document, the
// labels of its communicator, and whether every rank ran cleanly.
struct ShmRun {
  std::string rendered;
  std::string labels;
  bool ok = true;
};
ShmRun RenderAfterShm(const std::string& job, const std::function<Status(Communicator&)>& ops) {
  std::string rendered;
  bool ok = true;
  CommOptions o;
  o.job_id = job;
  o.name = testing::UniqueName("metrics");
  o.transport = "shm";
  auto results = testing::RunRanks(2, [&](Communicator& comm) -> Status {
    CHOIR_RETURN_IF_ERROR(ops(comm));
    CHOIR_RETURN_IF_ERROR(comm.Barrier().Wait());
    if (comm.rank() == 0) rendered = RenderMetrics();
    return comm.Barrier().Wait();
  }, o);
  for (const auto& r : results) ok = ok && r.create.ok() && r.run.ok();
  return {rendered, "job=\"" + job + "\",comm=\"" + o.name + "#0\",rank=\"0\",size=\"2\"", ok};
}

TEST(MetricsTest, SharedMemoryReadsAreCountedOnTheReadingSide) {
  const auto [rendered, labels, ok] = RenderAfterShm("metrics-shm", [](Communicator& comm) {
    std::vector<float> v(1000, 1.0f);
    return comm.Allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).Wait();
  });
  ASSERT_TRUE(ok);
  EXPECT_TRUE(Has(rendered, "choir_algorithm_selections_total{" + labels + ",op=\"allreduce\",algorithm=\"shm_flat\"} 1")) << rendered;
  EXPECT_TRUE(Has(rendered, "choir_peer_bytes_received_total{" + labels + ",peer=\"1\"} 4000")) << rendered;
  EXPECT_TRUE(Has(rendered, "choir_transport_bytes_received_total{" + labels + ",transport=\"shm\"} 4000")) << rendered;
}

// Where a rank reads only its own block of a peer's slot (alltoall,
// reduce_scatter, a scatter's receivers), only that block is counted.
TEST(MetricsTest, SlotReadsCountOnlyTheBlockRead) {
  const auto [rendered, labels, ok] = RenderAfterShm("metrics-blocks", [](Communicator& comm) -> Status {
    std::vector<float> in(500, 1.0f), out(500, 0.0f);
    CHOIR_RETURN_IF_ERROR(comm.Alltoall(in.data(), out.data(), 250, DataType::kFloat32).Wait());
    CHOIR_RETURN_IF_ERROR(comm.ReduceScatter(in.data(), out.data(), 250, DataType::kFloat32, ReduceOp::kSum).Wait());
    return comm.Scatter(in.data(), out.data(), 250, DataType::kFloat32, /*root=*/1).Wait();
  });
  ASSERT_TRUE(ok);
  // 1000 bytes (one block of 250 floats) from rank 1 in each of the three.
  EXPECT_TRUE(Has(rendered, "choir_peer_bytes_received_total{" + labels + ",peer=\"1\"} 3000")) << rendered;
}

TEST(MetricsTest, SizeClasses) {
  EXPECT_EQ(diag::SizeClassOf(0), 0);
  EXPECT_EQ(diag::SizeClassOf(4096), 0);
  EXPECT_EQ(diag::SizeClassOf(4097), 1);
  EXPECT_EQ(diag::SizeClassOf(16u << 20), 2);
  EXPECT_EQ(diag::SizeClassOf((16u << 20) + 1), 3);
}

TEST(MetricsTest, OneCallInNIsTimedPerKindAndSizeClass) {
  using algorithms::CollKind;
  auto m = diag::RegisterComm("j", "timing", 0, 2, /*time_one_in=*/4);
  std::string pattern;
  for (int i = 0; i < 9; ++i) {
    const bool timed = m->TimeThisCall(CollKind::kAllreduce, 8);
    pattern += timed ? 'T' : '-';
    if (timed) {
      m->RecordOp(CollKind::kAllreduce, 8, 2e-6, true, -1, 0);
    } else {
      m->RecordUntimedOp(CollKind::kAllreduce, 8, true, -1);
    }
  }
  EXPECT_EQ(pattern, "T---T---T");
  // Another size class and another kind start with a timed call of their own.
  EXPECT_TRUE(m->TimeThisCall(CollKind::kAllreduce, 1 << 20));
  EXPECT_TRUE(m->TimeThisCall(CollKind::kBroadcast, 8));
  // Until a timed call of the class succeeded, every call is timed.
  EXPECT_TRUE(m->TimeThisCall(CollKind::kBroadcast, 8));
  // With 1, every call.
  auto every = diag::RegisterComm("j", "every", 0, 2, /*time_one_in=*/1);
  every->RecordOp(CollKind::kAllreduce, 8, 1e-6, true, -1, 0);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(every->TimeThisCall(CollKind::kAllreduce, 8)) << i;
}

TEST(MetricsTest, UntimedCallsCountExactlyAndLastAsLongAsTheLastTimedOne) {
  using algorithms::CollKind;
  auto m = diag::RegisterComm("j", "untimed", 0, 2, /*time_one_in=*/8);
  m->RecordOp(CollKind::kAllreduce, 64, 2e-6, true, -1, /*late_arrival_seconds=*/1e-6);
  for (int i = 0; i < 3; ++i) m->RecordUntimedOp(CollKind::kAllreduce, 64, true, -1);
  m->RecordOp(CollKind::kAllreduce, 64, 20e-6, true, -1, 0);
  m->RecordUntimedOp(CollKind::kAllreduce, 64, true, -1);
  m->RecordUntimedOp(CollKind::kAllreduce, 64, /*ok=*/false, -1);
  const std::string text = RenderMetrics();
  const std::string labels = "job=\"j\",comm=\"untimed\",rank=\"0\",size=\"2\"";
  const std::string hist = "choir_collective_duration_seconds";
  const std::string cls = ",op=\"allreduce\",size_class=\"le4KiB\"";
  EXPECT_TRUE(Has(text, "choir_collectives_total{" + labels + ",op=\"allreduce\",status=\"ok\"} 6")) << text;
  EXPECT_TRUE(Has(text, "choir_collectives_total{" + labels + ",op=\"allreduce\",status=\"error\"} 1")) << text;
  EXPECT_TRUE(Has(text, "choir_collective_bytes_total{" + labels + ",op=\"allreduce\"} 384")) << text;
  // Four calls as long as the first timed one (2 µs), two as the second (20 µs).
  EXPECT_TRUE(Has(text, hist + "_bucket{" + labels + cls + ",le=\"1e-06\"} 0")) << text;
  EXPECT_TRUE(Has(text, hist + "_bucket{" + labels + cls + ",le=\"4e-06\"} 4")) << text;
  EXPECT_TRUE(Has(text, hist + "_bucket{" + labels + cls + ",le=\"1.6e-05\"} 4")) << text;
  EXPECT_TRUE(Has(text, hist + "_bucket{" + labels + cls + ",le=\"6.4e-05\"} 6")) << text;
  EXPECT_TRUE(Has(text, hist + "_bucket{" + labels + cls + ",le=\"+Inf\"} 6")) << text;
  EXPECT_TRUE(Has(text, hist + "_sum{" + labels + cls + "} 4.8e-05")) << text;
  EXPECT_TRUE(Has(text, hist + "_count{" + labels + cls + "} 6")) << text;
  // The first timed call waited 1 µs for data, and so do the three after it.
  EXPECT_TRUE(Has(text, "choir_late_arrival_seconds_total{" + labels + "} 4e-06")) << text;
}

TEST(MetricsTest, ErrorsAreCountedByCode) {
  auto m = diag::RegisterComm("j", "c", 0, 1);
  m->RecordError(401);
  m->RecordError(401);
  const std::string text = RenderMetrics();
  EXPECT_TRUE(Has(text, "choir_errors_total{job=\"j\",comm=\"c\",rank=\"0\",size=\"1\",code=\"E401\",name=\"CollectiveMismatch\"} 2")) << text;
}

}  // namespace
}  // namespace choir
