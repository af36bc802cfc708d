// Monotonic time and deadlines. Every blocking step in choir takes a Deadline.
//
// Thread-safety: values; Now() is safe from any thread.
#ifndef CHOIR_BASE_CLOCK_H_
#define CHOIR_BASE_CLOCK_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace choir {

using Clock = std::chrono::steady_clock;

// Nanoseconds on one of the kernel's clocks.
inline int64_t ClockNanos(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t NowNanos() { return ClockNanos(CLOCK_MONOTONIC); }

inline double NowSeconds() { return static_cast<double>(NowNanos()) * 1e-9; }

// The monotonic time with the resolution of the kernel's tick (1-4 ms),
// without reading the hardware clock: a few nanoseconds. Never ahead of
// NowNanos(), at most one tick behind it. For deadlines measured in seconds
// on paths where a full clock read would be a large share of the work.
inline int64_t CoarseNowNanos() { return ClockNanos(CLOCK_MONOTONIC_COARSE); }
// The coarse clock's resolution (one kernel tick): a deadline placed from
// CoarseNowNanos() + CoarseTickNanos() is never early, at most a tick late.
int64_t CoarseTickNanos();

// Nanoseconds for timing short operations: only differences of two readings
// mean anything, and never mix them with NowNanos(). Read from the CPU's
// time-stamp counter where the kernel itself keeps time with it (its clock
// source is "tsc"), or where the CPU says the counter runs at a constant
// rate (CPUID's invariant counter: a VM whose kernel keeps time with the
// hypervisor's clock, such as kvm-clock). A reading costs 11-16 ns instead
// of 25-38 ns for clock_gettime on the machine of docs/performance-log.md,
// and 11 ns instead of 26 on the Zen 5 VM there, whose kernel keeps time
// with kvm-clock; an 8-byte collective pays two. The counter's rate is
// measured against CLOCK_MONOTONIC_RAW over the first 20 ms of the
// process's use of this clock, from reading pairs no more than 2 µs apart
// (until then it reads CLOCK_MONOTONIC_RAW). Elsewhere it is
// CLOCK_MONOTONIC_RAW. Where the kernel does not trust the counter it may
// jump (a VM restored or moved to another host): ElapsedNanos checks long
// intervals against the coarse clock. Thread-safe.
int64_t OpNanos();
// Whether OpNanos() reads the time-stamp counter (for tests and diagnostics).
bool OpClockUsesCounter();

// Intervals shorter than this are taken from the operation clock as they
// are; longer ones are checked against the coarse clock.
inline constexpr int64_t kCounterTrustedNs = 1'000'000;
// The time since `op_t0` (an OpNanos() reading) and `coarse_t0` (a
// CoarseNowNanos() reading taken with it): the operation clock's interval,
// unless it is negative or, past kCounterTrustedNs, more than two ticks
// longer than the coarse clock's (a counter that jumped), when it is the
// coarse clock's. One clock read in the common case.
int64_t ElapsedNanos(int64_t op_t0, int64_t coarse_t0);
// ElapsedNanos's choice between an operation-clock interval and a
// coarse-clock one (for tests).
int64_t CheckedElapsed(int64_t counter_ns, int64_t coarse_ns, int64_t tick_ns);

// A point in time after which a blocking call gives up. Infinite() never expires.
class Deadline {
 public:
  static Deadline Infinite() { return Deadline(INT64_MAX); }
  static Deadline AfterSeconds(double seconds) { return AfterSecondsFrom(NowNanos(), seconds); }
  // The same from a clock reading the caller already has (one read less).
  static Deadline AfterSecondsFrom(int64_t now_ns, double seconds) {
    if (seconds <= 0) return Deadline(now_ns);
    if (seconds > 1e9) return Infinite();
    return Deadline(now_ns + static_cast<int64_t>(seconds * 1e9));
  }
  static Deadline AtNanos(int64_t ns) { return Deadline(ns); }

  bool infinite() const { return at_ns_ == INT64_MAX; }
  bool Expired() const { return !infinite() && NowNanos() >= at_ns_; }
  bool ExpiredAt(int64_t now_ns) const { return now_ns >= at_ns_; }
  int64_t at_nanos() const { return at_ns_; }
  // Nanoseconds left (0 when expired, INT64_MAX when infinite).
  int64_t RemainingNanos() const {
    if (infinite()) return INT64_MAX;
    const int64_t left = at_ns_ - NowNanos();
    return left > 0 ? left : 0;
  }
  // Milliseconds left for a store wait: at least 1 (0 would not wait at
  // all), and 100 years, what the stores take for "forever", when infinite.
  std::chrono::milliseconds RemainingMillis() const {
    if (infinite()) return std::chrono::hours(24 * 365 * 100);
    return std::chrono::milliseconds(std::max<int64_t>(1, RemainingNanos() / 1000000));
  }
  // Milliseconds left for poll()/epoll_wait(): -1 when infinite, rounded up otherwise,
  // capped at `cap_ms` so callers wake periodically to check other conditions.
  int PollTimeoutMs(int cap_ms = -1) const {
    if (infinite()) return cap_ms;
    const int64_t ms = (RemainingNanos() + 999999) / 1000000;
    if (cap_ms >= 0 && ms > cap_ms) return cap_ms;
    return static_cast<int>(ms);
  }
  static Deadline Earlier(Deadline a, Deadline b) { return a.at_ns_ < b.at_ns_ ? a : b; }

 private:
  explicit Deadline(int64_t at_ns) : at_ns_(at_ns) {}
  int64_t at_ns_;
};

}  // namespace choir

#endif  // CHOIR_BASE_CLOCK_H_
