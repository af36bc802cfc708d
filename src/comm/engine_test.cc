#include "comm/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "testing/one_cpu.h"

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

// A waiter that finds a task running on another thread never runs beside
// it: it waits for the engine, then runs the next task itself (the progress
// thread leaves the queue to threads that wait in Help()).
TEST(EngineTest, HelpWaitsForARunningTaskThenRunsTheNextItself) {
  Engine e;
  std::atomic<bool> release{false};
  std::atomic<bool> first_started{false};
  std::atomic<bool> first_running{false};
  std::atomic<bool> overlap{false};
  std::atomic<bool> second_ran{false};
  std::thread::id second_thread;
  e.Submit(
      [&] {
        first_running = true;
        first_started = true;
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        first_running = false;
      },
      false);
  e.Submit(
      [&] {
        if (first_running) overlap = true;
        second_thread = std::this_thread::get_id();
        second_ran = true;
      },
      false);
  while (!first_started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<bool> helper_returned{false};
  std::thread::id helper_id;
  std::thread helper([&] {
    helper_id = std::this_thread::get_id();
    e.Help([&] { return second_ran.load(); });
    helper_returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(second_ran) << "the second task ran while the first was running";
  EXPECT_FALSE(helper_returned) << "Help returned while its task was neither done nor runnable";
  release = true;
  helper.join();
  EXPECT_TRUE(second_ran);
  EXPECT_FALSE(overlap);
  EXPECT_EQ(second_thread, helper_id) << "the waiting thread should have run its own task";
  e.Drain();
}

// The background task runs for a thread that waits in Help(), and without
// anyone waiting on the progress thread after kBackgroundDelay; a second one
// set while one waits is dropped, and Drain() waits for it.
TEST(EngineTest, BackgroundTaskRunsInHelpOrLaterOnTheProgressThread) {
  {
    Engine e;
    std::atomic<int> ran{0};
    e.SubmitBackground([&] { ran.fetch_add(1); });
    e.SubmitBackground([&] { ran.fetch_add(100); });  // one is waiting: ignored
    e.Help(
        [&] { return ran.load() != 0; });  // runs it here (or waits for the progress thread's run)
    EXPECT_EQ(ran.load(), 1);
    e.Drain();
    EXPECT_EQ(ran.load(), 1);
  }
  {
    Engine e;
    std::atomic<bool> ran{false};
    std::thread::id ran_on;
    const auto t0 = std::chrono::steady_clock::now();
    e.SubmitBackground([&] {
      ran_on = std::this_thread::get_id();
      ran = true;
    });
    for (int i = 0; i < 10000 && !ran; ++i)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    ASSERT_TRUE(ran) << "the progress thread never ran the background task";
    EXPECT_GE(std::chrono::steady_clock::now() - t0, Engine::kBackgroundDelay);
    EXPECT_NE(ran_on, std::this_thread::get_id());
    // Not counted as queued (operations still run inline past it); Drain()
    // runs it at once.
    std::atomic<bool> later{false};
    e.SubmitBackground([&] { later = true; });
    EXPECT_FALSE(e.has_queued());
    e.Drain();
    EXPECT_TRUE(later);
  }
}

// Inline runs (no mutex) and queued tasks from several threads: every task
// runs exactly once, never beside another, and a task queued while an inline
// one runs is started by the progress thread as soon as the inline one ends
// (Drain returning proves no wake-up was lost).
TEST(EngineTest, InlineAndQueuedTasksFromManyThreadsNeverOverlap) {
  for (int round = 0; round < 20; ++round) {
    Engine e;
    std::atomic<int> running{0};
    std::atomic<bool> overlap{false};
    std::atomic<int> ran{0};
    std::atomic<int> inline_ran{0};
    auto task = [&] {
      if (running.fetch_add(1) != 0) overlap = true;
      std::this_thread::yield();  // widen the window for an overlap
      running.fetch_sub(1);
      ran.fetch_add(1);
    };
    constexpr int kThreads = 4, kPerThread = 500;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        // First only inline attempts (threads contend for the claim), then
        // a mix with queued tasks, after which inline runs are rare (an
        // inline run must not overtake what is queued).
        for (int i = 0; i < kPerThread; ++i) {
          if (i >= kPerThread / 2 && (i + t) % 3 == 0) {
            e.Submit(task, false);
          } else if (e.TryRunInline(task)) {
            inline_ran.fetch_add(1);
          } else {
            e.Submit(task, true);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    // Bounded: a lost wake-up would leave queued tasks behind (the
    // destructor still runs them, so a failure here does not hang).
    for (int i = 0; i < 10000 && ran.load() < kThreads * kPerThread; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(ran.load(), kThreads * kPerThread) << "queued tasks were not started";
    e.Drain();
    EXPECT_FALSE(overlap);
    EXPECT_EQ(ran.load(), kThreads * kPerThread);
    EXPECT_GT(inline_ran.load(), 0);
  }
}

// A task queued while an inline operation runs waits for it, and starts
// without anyone prodding the engine once the inline operation returns.
TEST(EngineTest, TaskQueuedDuringAnInlineRunStartsWhenItEnds) {
  Engine e;
  std::atomic<bool> release{false};
  std::atomic<bool> inline_started{false};
  std::atomic<bool> queued_ran{false};
  std::thread runner([&] {
    EXPECT_TRUE(e.TryRunInline([&] {
      inline_started = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }));
  });
  while (!inline_started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(e.TryRunInline([] {}));  // busy
  e.Submit([&] { queued_ran = true; }, true);  // may not run inline: busy, so queued
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(queued_ran);
  release = true;
  runner.join();
  for (int i = 0; i < 5000 && !queued_ran; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(queued_ran) << "the progress thread was not woken";
  e.Drain();
  EXPECT_TRUE(e.TryRunInline([] {}));  // idle again
}

// Sharing the caller's CPU, the progress thread leaves a queued task alone
// for kPickupDelay: a caller that waits within it runs the task itself (no
// hand-off); one that does not wait finds it run on the progress thread, not
// earlier than the delay. Both without any wake-up from Submit once the
// thread sleeps on its timer.
TEST(EngineTest, SharingItsCpuTheEngineLeavesQueuedTasksToAWaitingCaller) {
  using Clock = std::chrono::steady_clock;
  // On one CPU, as the setting is meant for: the progress thread (started
  // by the first Submit) inherits this thread's affinity.
  testing::OneCpuForThisThread one_cpu;
  ASSERT_TRUE(one_cpu.ok());
  Engine e;
  e.set_shares_cpu(true);
  int checked = 0;
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> ran{false};
    std::thread::id ran_on;
    const auto submitted = Clock::now();
    e.Submit(
        [&] {
          ran_on = std::this_thread::get_id();
          ran = true;
        },
        false);
    const auto helping = Clock::now();
    e.Help([&] { return ran.load(); });
    ASSERT_TRUE(ran);
    // Only a caller that came within the delay is owed the task.
    if (helping - submitted < Engine::kPickupDelay) {
      ++checked;
      EXPECT_EQ(ran_on, std::this_thread::get_id()) << "round " << round;
    }
  }
  EXPECT_GT(checked, 0) << "no round reached Help() within " << Engine::kPickupDelay.count() << " us of Submit()";
  for (int round = 0; round < 5; ++round) {
    std::atomic<bool> ran{false};
    std::thread::id ran_on;
    Clock::time_point ran_at;
    const auto submitted = Clock::now();
    e.Submit(
        [&] {
          ran_at = Clock::now();
          ran_on = std::this_thread::get_id();
          ran = true;
        },
        false);
    for (int i = 0; i < 5000 && !ran; ++i) std::this_thread::sleep_for(std::chrono::microseconds(200));
    ASSERT_TRUE(ran) << "round " << round << ": the progress thread never took the queued task";
    EXPECT_NE(ran_on, std::this_thread::get_id());
    EXPECT_GE(ran_at - submitted, Engine::kPickupDelay) << "round " << round;
  }
  // Two queued, the first longer than the delay: the caller that waits for
  // the second right after the first gets the same grace, not a progress
  // thread that took it the moment the first helper left.
  int checked_pairs = 0;
  for (int round = 0; round < 10; ++round) {
    std::atomic<bool> first_done{false}, second_done{false};
    std::thread::id second_on;
    e.Submit(
        [&] {
          std::this_thread::sleep_for(Engine::kPickupDelay * 3);
          first_done = true;
        },
        false);
    e.Submit(
        [&] {
          second_on = std::this_thread::get_id();
          second_done = true;
        },
        false);
    e.Help([&] { return first_done.load(); });
    const auto left = Clock::now();
    const bool second_already = second_done.load();
    e.Help([&] { return second_done.load(); });
    if (!second_already && Clock::now() - left < Engine::kPickupDelay) {
      ++checked_pairs;
      EXPECT_EQ(second_on, std::this_thread::get_id()) << "round " << round;
    }
  }
  EXPECT_GT(checked_pairs, 0);
  std::atomic<bool> drained{false};
  e.Submit([&] { drained = true; }, false);
  e.Drain();  // runs it without waiting for the delay's end
  EXPECT_TRUE(drained);
}

// A task left queued behind one a helper ran for longer than the progress
// thread's timer lasts (100 ms after the last Submit): the progress thread
// still takes it after the delay, for a caller that never waits in Help()
// (Work::Then, or Done() polled). It used to sleep until the next Submit.
TEST(EngineTest, SharingItsCpuTheEngineRunsATaskLeftBehindALongOne) {
  Engine e;
  e.set_shares_cpu(true);
  for (int round = 0; round < 2; ++round) {
    std::atomic<bool> first_done{false}, second_done{false};
    e.Submit(
        [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(150));
          first_done = true;
        },
        false);
    e.Submit([&] { second_done = true; }, false);
    e.Help([&] { return first_done.load(); });
    for (int i = 0; i < 10000 && !second_done; ++i) std::this_thread::sleep_for(std::chrono::microseconds(200));
    EXPECT_TRUE(second_done) << "round " << round << ": the task left queued never ran";
    e.Drain();
  }
}

// StartQueued lets the progress thread take a deferred task without the
// delay: for callers that will not wait in Help() (Work::Start).
TEST(EngineTest, StartQueuedHandsADeferredTaskToTheProgressThread) {
  Engine e;
  e.set_shares_cpu(true);
  for (int round = 0; round < 5; ++round) {
    std::atomic<bool> ran{false};
    std::thread::id ran_on;
    e.Submit(
        [&] {
          ran_on = std::this_thread::get_id();
          ran = true;
        },
        false);
    e.StartQueued();
    for (int i = 0; i < 5000 && !ran; ++i) std::this_thread::sleep_for(std::chrono::microseconds(200));
    ASSERT_TRUE(ran) << "round " << round;
    EXPECT_NE(ran_on, std::this_thread::get_id());
  }
  e.StartQueued();  // nothing queued: nothing happens
  e.Drain();
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
