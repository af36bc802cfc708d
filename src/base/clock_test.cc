#include "base/clock.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
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

// Where the kernel keeps time with the counter (this machine), the
// operation clock must use it: otherwise every collective pays two full
// clock reads again, and nothing else would notice.
TEST(ClockTest, OperationClockUsesTheCounterWhereTheKernelDoes) {
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  ASSERT_TRUE(static_cast<bool>(in >> source)) << "no clock source file";
#if defined(__x86_64__)
  EXPECT_EQ(OpClockUsesCounter(), source == "tsc") << "kernel clock source: " << source;
#else
  EXPECT_FALSE(OpClockUsesCounter());
#endif
}

}  // namespace
}  // namespace choir
