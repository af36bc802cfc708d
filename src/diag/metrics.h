// Always-on metrics of every communicator in this process.
//
// Counters are plain relaxed atomics updated once per operation (never per
// byte or per chunk); the hot path takes no lock and allocates nothing, so
// keeping them on costs a few nanoseconds per collective (docs/performance.md,
// "Metrics overhead"). RenderPrometheus() turns every live communicator's counters
// into the Prometheus text format (base units: seconds, bytes; `_total`
// counters), labelled with job, communicator, rank and world size.
//
// Thread-safety: a communicator's counters are bumped only by the thread
// running its current operation (one at a time, comm/engine.h): single-writer
// adds without locked instructions. Register/Render may be called
// concurrently with updates (a render sees a consistent-enough snapshot: each
// value is read atomically).
#ifndef CHOIR_DIAG_METRICS_H_
#define CHOIR_DIAG_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/op.h"

namespace choir::diag {

// Upper bounds (seconds) of the duration histogram buckets; +Inf is implicit.
inline constexpr std::array<double, 14> kDurationBuckets = {
    1e-6, 4e-6, 16e-6, 64e-6, 256e-6, 1e-3, 4e-3, 16e-3, 64e-3, 0.25, 1, 4, 16, 64};
// Message size classes for the histogram: <=4K, <=256K, <=16M, larger.
inline constexpr int kSizeClasses = 4;
inline constexpr std::array<uint64_t, kSizeClasses - 1> kSizeClassLimits = {4096, 256 * 1024, 16 * 1024 * 1024};
const char* SizeClassName(int size_class);
inline int SizeClassOf(uint64_t bytes) {
  for (int i = 0; i < kSizeClasses - 1; ++i) {
    if (bytes <= kSizeClassLimits[static_cast<size_t>(i)]) return i;
  }
  return kSizeClasses - 1;
}

// The last timed operation of a kind and size class, which stands in for the
// untimed ones after it (CommMetrics::TimeThisCall).
struct TimedSample {
  bool set = false;
  uint8_t bucket = 0;
  uint64_t ns = 0;
  uint64_t late_ns = 0;
};

struct OpCounters {
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> bytes{0};
  std::array<std::array<std::atomic<uint64_t>, kDurationBuckets.size() + 1>, kSizeClasses> buckets{};
  std::array<std::atomic<uint64_t>, kSizeClasses> duration_ns{};
  std::array<std::atomic<uint64_t>, kSizeClasses> count{};
  // Timing state, written by the operation's thread and never rendered.
  std::array<uint32_t, kSizeClasses> untimed_left{};  // untimed calls before the next timed one
  std::array<TimedSample, kSizeClasses> last{};
};

class CommMetrics {
 public:
  // `time_one_in`: CHOIR_TIME_ONE_IN (TimeThisCall).
  CommMetrics(std::string job, std::string comm, int rank, int size, uint32_t time_one_in = 1);

  // Whether the collective about to run is timed if it runs on the
  // caller's thread: the first of its kind and size class, then one in
  // `time_one_in` of them. Reading the time-stamp counter twice cost about a
  // fifth of a 16-64 byte broadcast or reduce on the Zen 5 host
  // (docs/performance.md, "Metrics overhead"). Asked of every collective
  // but alltoallv (whose class depends on each rank's counts), so every
  // rank, making the same calls, times the same ones (their late arrivals
  // compare). Operations on the progress thread, alltoallv and point-to-point
  // ones are always timed (CommImpl::Execute).
  bool TimeThisCall(algorithms::CollKind kind, uint64_t bytes) {
    OpCounters& c = ops_[static_cast<size_t>(kind)];
    const auto sc = static_cast<size_t>(SizeClassOf(bytes));
    uint32_t& left = c.untimed_left[sc];
    if (left == 0 || !c.last[sc].set) {
      left = time_one_in_ - 1;
      return true;
    }
    --left;
    return false;
  }
  // One finished operation (bytes as in OpArgs::SelectionBytes), timed.
  // `algorithm` is an index into algorithms::AllAlgorithms() (-1: none).
  void RecordOp(algorithms::CollKind kind, uint64_t bytes, double seconds, bool ok, int algorithm,
                double late_arrival_seconds);
  // One finished operation that was not timed: counted exactly, and in the
  // duration histogram, its sum and the late-arrival counter as long as the
  // last timed one of its kind and size class.
  void RecordUntimedOp(algorithms::CollKind kind, uint64_t bytes, bool ok, int algorithm);
  void RecordError(int code);
  // Traffic per peer and transport (0 = shm, 1 = tcp), added once per operation.
  void AddPeerBytes(int peer, int transport, uint64_t sent, uint64_t received);

  const std::string& job() const { return job_; }

 private:
  friend std::string RenderPrometheus();
  // Adds one operation of `sample`'s duration and late arrival.
  void AddSample(OpCounters& c, size_t size_class, const TimedSample& sample, int algorithm);
  // Appends this communicator's series of family `family` (see metrics.cc).
  void AppendFamily(int family, std::string* out) const;
  std::string Labels() const;

  const std::string job_, comm_;
  const int rank_, size_;
  const uint32_t time_one_in_;
  std::array<OpCounters, algorithms::kNumCollKinds> ops_;
  std::atomic<uint64_t> late_arrival_ns_{0};
  std::vector<std::atomic<uint64_t>> peer_sent_, peer_received_;
  std::array<std::atomic<uint64_t>, 2> transport_sent_{}, transport_received_{};
  static constexpr int kMaxAlgorithms = 128;
  std::array<std::atomic<uint64_t>, kMaxAlgorithms> algorithm_counts_{};
  mutable std::mutex mu_;  // guards errors_ (written only on failures)
  std::vector<std::pair<int, uint64_t>> errors_;  // error number -> count
};

// Registers a communicator's metrics for rendering until the returned handle
// (held by the communicator) is destroyed.
std::shared_ptr<CommMetrics> RegisterComm(std::string job, std::string comm, int rank, int size,
                                          uint32_t time_one_in = 1);

// Every live communicator of this process, in Prometheus text format.
std::string RenderPrometheus();

}  // namespace choir::diag

#endif  // CHOIR_DIAG_METRICS_H_
