// Cost of choir's always-on metrics on the collective path: one
// CommMetrics::RecordOp per finished operation (the algorithm counter is an
// atomic indexed by the algorithm's place in the registry) and one
// AddPeerBytes per peer; and the timing of a small call with and without
// sampling (CHOIR_TIME_ONE_IN).
// docs/performance.md ("Metrics overhead") records the figures.
//
//   bin/choir_metrics_bench
//
// Thread-safety: one thread, as on a communicator: its counters have one
// writer, the thread running its current operation (diag/metrics.h).
#include <benchmark/benchmark.h>

#include <string>

#include "algorithms/algorithms.h"
#include "base/clock.h"
#include "diag/metrics.h"

namespace {

using choir::algorithms::CollKind;

int AlgorithmIndex(CollKind kind, const char* name) {
  const auto* a = choir::algorithms::FindAlgorithm(kind, name);
  return static_cast<int>(a - choir::algorithms::AllAlgorithms().data());
}

std::shared_ptr<choir::diag::CommMetrics>& Shared() {
  static auto m = choir::diag::RegisterComm("bench", "world#0", 0, 8);
  return m;
}

void BM_RecordOp(benchmark::State& state) {
  const int algorithm = AlgorithmIndex(CollKind::kAllreduce, "recursive_doubling");
  auto& m = Shared();
  for (auto _ : state) {
    m->RecordOp(CollKind::kAllreduce, 8, 12e-6, true, algorithm, 1e-6);
  }
}
BENCHMARK(BM_RecordOp);

void BM_RecordOpAndPeers(benchmark::State& state) {
  const int algorithm = AlgorithmIndex(CollKind::kAllreduce, "ring");
  auto& m = Shared();
  for (auto _ : state) {
    m->RecordOp(CollKind::kAllreduce, 1 << 20, 1e-3, true, algorithm, 1e-5);
    m->AddPeerBytes(1, 0, 1 << 19, 1 << 19);
    m->AddPeerBytes(7, 1, 1 << 19, 1 << 19);
  }
}
BENCHMARK(BM_RecordOpAndPeers);

// What a small collective run on the caller's thread pays for its duration
// and metrics: timed (two time-stamp counter reads and RecordOp), as every
// call was before CHOIR_TIME_ONE_IN, and with one call in 8 timed (the
// default; diag::CommMetrics::TimeThisCall).
template <uint32_t kOneIn>
void BM_CallTimingAndMetrics(benchmark::State& state) {
  static auto m = choir::diag::RegisterComm("bench", "timing#" + std::to_string(kOneIn), 0, 2, kOneIn);
  const int algorithm = AlgorithmIndex(CollKind::kAllreduce, "recursive_doubling");
  for (auto _ : state) {
    if (m->TimeThisCall(CollKind::kAllreduce, 8)) {
      const int64_t t0 = choir::OpNanos();
      const int64_t elapsed = choir::ElapsedNanos(t0, 0);
      m->RecordOp(CollKind::kAllreduce, 8, static_cast<double>(elapsed) * 1e-9, true, algorithm, 0);
    } else {
      m->RecordUntimedOp(CollKind::kAllreduce, 8, true, algorithm);
    }
  }
}
BENCHMARK(BM_CallTimingAndMetrics<1>)->Name("BM_CallTimingAndMetrics/every_call");
BENCHMARK(BM_CallTimingAndMetrics<8>)->Name("BM_CallTimingAndMetrics/one_in_8");

void BM_RenderPrometheus(benchmark::State& state) {
  Shared()->RecordOp(CollKind::kBroadcast, 64, 1e-5, true, AlgorithmIndex(CollKind::kBroadcast, "binomial"), 0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(choir::diag::RenderPrometheus());
  }
}
BENCHMARK(BM_RenderPrometheus);

}  // namespace

BENCHMARK_MAIN();
