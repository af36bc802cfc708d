#include "base/clock.h"

#include <atomic>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace choir {
namespace {

int64_t RawNanos() { return ClockNanos(CLOCK_MONOTONIC_RAW); }

int64_t ReadTick() {
  timespec res{};
  if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) != 0) return 10'000'000;  // the coarsest Linux tick (100 Hz)
  return static_cast<int64_t>(res.tv_sec) * 1000000000 + res.tv_nsec;
}

#if defined(__x86_64__)
// How long the counter's rate is measured before it is used, and how far
// apart the two kernel clock reads around a counter read may be for the pair
// to count (a thread preempted or interrupted in between would skew the
// rate for the whole process).
constexpr int64_t kCalibrationNs = 20'000'000;
constexpr int64_t kTightPairNs = 2'000;

bool KernelKeepsTimeWithCounter() {
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  return (in >> source) && source == "tsc";
}

// CPUID 0x80000007, EDX bit 8: the counter runs at a constant rate in every
// power state (the kernel's constant_tsc and nonstop_tsc).
bool CounterIsInvariant() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(0x80000007, &a, &b, &c, &d) != 0 && (d & (1u << 8)) != 0;
}

// A counter reading and the kernel time it was taken at (the middle of two
// kernel reads around it); false when they were too far apart.
bool TightPair(uint64_t* ticks, int64_t* ns) {
  const int64_t before = RawNanos();
  *ticks = __rdtsc();
  const int64_t after = RawNanos();
  *ns = before + (after - before) / 2;
  return after - before <= kTightPairNs;
}

// The first tight reading pair, and the measured nanoseconds per counter
// tick (0 until measured; set once). Readings before and after the rate is
// known are both CLOCK_MONOTONIC_RAW time, so an interval across the switch
// stays right to within the measurement's error (2 µs over 20 ms: 1e-4).
struct CounterClock {
  CounterClock() {
    usable = KernelKeepsTimeWithCounter() || CounterIsInvariant();
    for (int i = 0; usable && i < 100; ++i) {
      if (TightPair(&ticks0, &ns0)) return;
    }
    usable = false;  // never a tight pair: keep the kernel clock
  }
  bool usable = false;
  int64_t ns0 = 0;
  uint64_t ticks0 = 0;
  std::atomic<double> ns_per_tick{0};
};

CounterClock& Counter() {
  static CounterClock clock;
  return clock;
}

// The counter clock once its rate is known, copied out of Counter() for the
// fast path: every reading then costs one load to find it calibrated, no
// call and no guard of a function-local static (an 8-byte collective reads
// the clock twice).
struct Calibrated {
  std::atomic<double> ns_per_tick{0};  // 0: not yet (take the slow path)
  std::atomic<uint64_t> ticks0{0};
  std::atomic<int64_t> ns0{0};
};
constinit Calibrated g_calibrated;
#endif

}  // namespace

int64_t CoarseTickNanos() {
  static const int64_t tick = ReadTick();
  return tick;
}

int64_t OpNanos() {
#if defined(__x86_64__)
  // Signed: a counter read before the anchor (another CPU's, a few ticks
  // behind) gives a small negative offset, not a wrapped one.
  if (const double fast = g_calibrated.ns_per_tick.load(std::memory_order_acquire); fast > 0) {
    const auto ticks = static_cast<int64_t>(__rdtsc() - g_calibrated.ticks0.load(std::memory_order_relaxed));
    return g_calibrated.ns0.load(std::memory_order_relaxed) + static_cast<int64_t>(static_cast<double>(ticks) * fast);
  }
  CounterClock& c = Counter();
  if (c.usable) {
    const double scale = c.ns_per_tick.load(std::memory_order_acquire);
    if (scale > 0) {
      // Every thread that finds the rate set publishes the same three values.
      g_calibrated.ticks0.store(c.ticks0, std::memory_order_relaxed);
      g_calibrated.ns0.store(c.ns0, std::memory_order_relaxed);
      g_calibrated.ns_per_tick.store(scale, std::memory_order_release);
      const auto ticks = static_cast<int64_t>(__rdtsc() - c.ticks0);
      return c.ns0 + static_cast<int64_t>(static_cast<double>(ticks) * scale);
    }
    const int64_t now = RawNanos();
    if (now - c.ns0 >= kCalibrationNs) {
      uint64_t ticks = 0;
      int64_t ns = 0;
      if (TightPair(&ticks, &ns) && ticks > c.ticks0) {
        // The first thread to measure sets the rate; the others use it.
        double unset = 0;
        c.ns_per_tick.compare_exchange_strong(
            unset, static_cast<double>(ns - c.ns0) / static_cast<double>(ticks - c.ticks0),
            std::memory_order_acq_rel);
      }
    }
    return now;
  }
#endif
  return RawNanos();
}

int64_t CheckedElapsed(int64_t counter_ns, int64_t coarse_ns, int64_t tick_ns) {
  if (counter_ns >= 0 && counter_ns < kCounterTrustedNs) return counter_ns;
  // Longer, or negative: the counter may have jumped (a VM moved or
  // restored). Within two ticks of the coarse clock it is right.
  if (counter_ns >= 0 && counter_ns <= coarse_ns + 2 * tick_ns) return counter_ns;
  return std::max<int64_t>(0, coarse_ns);
}

int64_t ElapsedNanos(int64_t op_t0, int64_t coarse_t0) {
  const int64_t d = OpNanos() - op_t0;
  if (d >= 0 && d < kCounterTrustedNs) return d;  // the common case: no second clock read
  return CheckedElapsed(d, CoarseNowNanos() - coarse_t0, CoarseTickNanos());
}

bool OpClockUsesCounter() {
#if defined(__x86_64__)
  return Counter().usable;
#else
  return false;
#endif
}

}  // namespace choir
