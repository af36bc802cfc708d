#include "comm/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace choir::comm {
namespace {

// Whoever runs them (progress thread or a helping waiter), queued tasks run
// one at a time and in the order they were submitted.
TEST(EngineTest, HelpingWaiterKeepsOrderAndRunsUntilItsTaskIsDone) {
  for (int round = 0; round < 50; ++round) {
    Engine e;
    std::mutex mu;
    std::vector<int> order;
    std::atomic<int> running{0};
    std::atomic<bool> overlap{false};
    std::atomic<bool> last_done{false};
    for (int i = 0; i < 5; ++i) {
      e.Submit([&, i] {
        if (running.fetch_add(1) != 0) overlap = true;
        {
          std::lock_guard<std::mutex> lock(mu);
          order.push_back(i);
        }
        running.fetch_sub(1);
        if (i == 4) last_done = true;
      }, false);
    }
    e.Help([&] { return last_done.load(); });
    e.Drain();
    EXPECT_FALSE(overlap);
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  }
}

// A waiter cannot help while another thread runs a task: it returns without
// running the next one, which must wait for its turn.
TEST(EngineTest, HelpDoesNotRunBesideARunningTask) {
  Engine e;
  std::atomic<bool> release{false};
  std::atomic<bool> first_started{false};
  std::atomic<bool> second_ran{false};
  e.Submit([&] {
    first_started = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }, false);
  e.Submit([&] { second_ran = true; }, false);
  while (!first_started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  e.Help([&] { return second_ran.load(); });  // the progress thread is busy: nothing to do here
  EXPECT_FALSE(second_ran);
  release = true;
  e.Drain();
  EXPECT_TRUE(second_ran);
}

TEST(EngineTest, HelpReturnsAtOnceWhenDone) {
  Engine e;
  bool ran = false;
  e.Help([] { return true; });
  e.Submit([&] { ran = true; }, true);  // idle: runs inline
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace choir::comm
