#include "base/clock.h"

#include <atomic>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace choir {
namespace {

int64_t RawNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

#if defined(__x86_64__)
// How long the counter's rate is measured before it is used.
constexpr int64_t kCalibrationNs = 10'000'000;

bool KernelKeepsTimeWithCounter() {
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  return (in >> source) && source == "tsc";
}

// The first reading pair, and the measured nanoseconds per counter tick
// (0 until measured). Readings before and after the rate is known are both
// CLOCK_MONOTONIC_RAW time, so an interval across the switch stays right to
// within the measurement's error (a few parts per million).
struct CounterClock {
  bool usable = KernelKeepsTimeWithCounter();
  int64_t ns0 = RawNanos();
  uint64_t ticks0 = __rdtsc();
  std::atomic<double> ns_per_tick{0};
};

CounterClock& Counter() {
  static CounterClock clock;
  return clock;
}
#endif

}  // namespace

int64_t OpNanos() {
#if defined(__x86_64__)
  CounterClock& c = Counter();
  if (c.usable) {
    const double scale = c.ns_per_tick.load(std::memory_order_relaxed);
    if (scale > 0) return c.ns0 + static_cast<int64_t>(static_cast<double>(__rdtsc() - c.ticks0) * scale);
    const uint64_t ticks = __rdtsc();
    const int64_t now = RawNanos();
    if (now - c.ns0 >= kCalibrationNs && ticks > c.ticks0) {
      c.ns_per_tick.store(static_cast<double>(now - c.ns0) / static_cast<double>(ticks - c.ticks0),
                          std::memory_order_relaxed);
    }
    return now;
  }
#endif
  return RawNanos();
}

bool OpClockUsesCounter() {
#if defined(__x86_64__)
  return Counter().usable;
#else
  return false;
#endif
}

}  // namespace choir
