#include "base/clock.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace choir {
namespace {

// Readings never go back, also across the switch from the kernel's clock to
// the time-stamp counter 20 ms into the process's use of the clock, and an
// interval that spans the switch is the system clock's interval (a jump at
// the switch would show as a difference).
TEST(ClockTest, OperationClockIsMonotonicAndContinuousAcrossItsCalibration) {
  const int64_t op0 = OpNanos();
  const int64_t sys0 = NowNanos();
  int64_t last = op0;
  while (last - op0 < 40'000'000) {
    const int64_t now = OpNanos();
    ASSERT_GE(now, last);
    last = now;
  }
  const int64_t op1 = OpNanos();
  const int64_t sys1 = NowNanos();
  EXPECT_NEAR(static_cast<double>(op1 - op0) / static_cast<double>(sys1 - sys0), 1.0, 0.01);
}

// An interval on the operation clock is the interval NowNanos() measures,
// within 1 % over 50 ms (the counter's measured rate is good to a few parts
// per million; the rest is the time between the two clocks' reads).
TEST(ClockTest, OperationClockIntervalsMatchTheSystemClock) {
  // Past the calibration first (the previous test may have run it already).
  const int64_t warm = OpNanos();
  while (OpNanos() - warm < 20'000'000) {
  }
  std::vector<double> ratios;
  for (int i = 0; i < 3; ++i) {
    const int64_t s0 = NowNanos();
    const int64_t o0 = OpNanos();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int64_t o1 = OpNanos();
    const int64_t s1 = NowNanos();
    ratios.push_back(static_cast<double>(o1 - o0) / static_cast<double>(s1 - s0));
  }
  std::sort(ratios.begin(), ratios.end());
  EXPECT_NEAR(ratios[1], 1.0, 0.01) << "counter in use: " << OpClockUsesCounter();
}

// The coarse clock is never ahead of the precise one and at most a tick
// behind it (read between two precise reads, so a test descheduled between
// the reads cannot fail it).
TEST(ClockTest, CoarseClockTrailsTheSystemClockByAtMostATick) {
  const int64_t tick = CoarseTickNanos();
  EXPECT_GT(tick, 0);
  EXPECT_LE(tick, 10'000'000);  // 100 Hz is the coarsest Linux tick
  for (int i = 0; i < 1000; ++i) {
    const int64_t before = NowNanos();
    const int64_t coarse = CoarseNowNanos();
    const int64_t after = NowNanos();
    ASSERT_LE(coarse, after);
    ASSERT_GE(coarse, before - 2 * tick);
  }
}

#if defined(__x86_64__)
// Whether /proc/cpuinfo lists every one of `flags` for the first CPU.
bool CpuHasFlags(const std::vector<std::string>& flags) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> have;
    for (std::string w; words >> w;) have.insert(w);
    return std::all_of(flags.begin(), flags.end(), [&](const std::string& f) { return have.count(f) != 0; });
  }
  return false;
}
#endif

// Where the kernel keeps time with the counter, or the CPU says the counter
// runs at a constant rate in every state (the kernel's constant_tsc and
// nonstop_tsc flags; on this VM the kernel keeps time with kvm-clock), the
// operation clock must use it: otherwise every collective pays two full
// clock reads again, and nothing else would notice.
TEST(ClockTest, OperationClockUsesTheCounterWhereItIsInvariant) {
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  ASSERT_TRUE(static_cast<bool>(in >> source)) << "no clock source file";
#if defined(__x86_64__)
  const bool invariant = CpuHasFlags({"constant_tsc", "nonstop_tsc"});
  EXPECT_EQ(OpClockUsesCounter(), source == "tsc" || invariant)
      << "kernel clock source: " << source << ", invariant counter: " << invariant;
#else
  EXPECT_FALSE(OpClockUsesCounter());
#endif
}

// A short interval is the counter's as it is; a long one is checked against
// the coarse clock: the counter's is kept within two ticks of it, and a
// counter that jumped (forward past two ticks, or backward) gives the coarse
// clock's interval instead.
TEST(ClockTest, LongIntervalsAreCheckedAgainstTheCoarseClock) {
  const int64_t tick = 4'000'000;
  EXPECT_EQ(CheckedElapsed(750, 0, tick), 750);                               // short: the counter's
  EXPECT_EQ(CheckedElapsed(kCounterTrustedNs - 1, 0, tick), kCounterTrustedNs - 1);
  EXPECT_EQ(CheckedElapsed(9'000'000, 4'000'000, tick), 9'000'000);           // within two ticks
  EXPECT_EQ(CheckedElapsed(12'000'001, 4'000'000, tick), 4'000'000);          // jumped forward
  EXPECT_EQ(CheckedElapsed(3'600'000'000'000, 8'000'000, tick), 8'000'000);   // an hour ahead
  EXPECT_EQ(CheckedElapsed(-5'000, 4'000'000, tick), 4'000'000);              // went back
  EXPECT_EQ(CheckedElapsed(-5'000, -1, tick), 0);                             // never negative
  // Measured: a 20 ms sleep, both clocks, through ElapsedNanos.
  const int64_t op0 = OpNanos();
  const int64_t coarse0 = CoarseNowNanos();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int64_t elapsed = ElapsedNanos(op0, coarse0);
  EXPECT_GE(elapsed, 19'000'000);
  EXPECT_LE(elapsed, 20'000'000 + 2 * CoarseTickNanos() + 50'000'000);  // a descheduled test may sleep longer
}

}  // namespace
}  // namespace choir
