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
// the time-stamp counter 10 ms into the process's use of the clock, and they
// never jump: consecutive readings are less than a millisecond apart.
TEST(ClockTest, OperationClockIsMonotonicAndContinuousAcrossItsCalibration) {
  const int64_t first = OpNanos();
  int64_t last = first;
  int64_t biggest_step = 0;
  while (last - first < 30'000'000) {
    const int64_t now = OpNanos();
    ASSERT_GE(now, last);
    biggest_step = std::max(biggest_step, now - last);
    last = now;
  }
  EXPECT_LT(biggest_step, 1'000'000) << "readings jumped";
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
// (4 ms at 250 Hz; 20 ms allows for a descheduled test) behind.
TEST(ClockTest, CoarseClockTrailsTheSystemClockByAtMostATick) {
  for (int i = 0; i < 1000; ++i) {
    const int64_t coarse = CoarseNowNanos();
    const int64_t precise = NowNanos();
    ASSERT_LE(coarse, precise);
    ASSERT_LT(precise - coarse, 20'000'000);
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
