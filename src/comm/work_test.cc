#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "comm/work_state.h"

namespace choir {
namespace {

CompletionInfo SomeInfo() {
  CompletionInfo i;
  i.algorithm = "shm_flat";
  i.sequence = 7;
  i.seconds = 0.25;
  return i;
}

// States from NewWorkState: distinct while alive (more of them than a
// thread keeps), freed on another thread and on a thread that then exits,
// each completing with its own result; a block given back is the next one
// taken on that thread where the build recycles them.
TEST(WorkStateTest, RecycledStatesAreIndependentAcrossThreads) {
  std::vector<std::shared_ptr<Work::State>> states;
  for (int i = 0; i < 20; ++i) states.push_back(NewWorkState());
  for (size_t i = 0; i < states.size(); ++i) {
    for (size_t j = 0; j < i; ++j) ASSERT_NE(states[i].get(), states[j].get());
  }
  std::thread([moved = std::move(states)]() mutable { moved.clear(); }).join();
  std::thread([] {
    for (int i = 0; i < 12; ++i) {
      auto s = NewWorkState();
      s->Complete(Status::Ok(), SomeInfo());
    }
  }).join();  // exits with blocks kept: they go back to the heap
  for (int round = 0; round < 3; ++round) {
    auto a = NewWorkState();
    auto b = NewWorkState();
    a->Complete(Status(Code::kPeerLost, "a"), SomeInfo());
    b->Complete(Status::Ok(), SomeInfo());
    EXPECT_EQ(Work(a).status().code(), Code::kPeerLost);
    EXPECT_TRUE(Work(b).status().ok());
    const void* freed = b.get();
    b.reset();
    auto c = NewWorkState();
    EXPECT_FALSE(c->is_done());  // a fresh state, whatever block it lives in
    if (RecyclesWorkStates()) {
      EXPECT_EQ(c.get(), freed);
    }
  }
}

// Complete() takes no lock unless a callback was registered; a callback
// registered at the same moment from another thread still runs, exactly once,
// and sees the final status and info.
TEST(WorkStateTest, CallbackRacingWithCompletionRunsExactlyOnce) {
  for (int round = 0; round < 20000; ++round) {
    auto state = std::make_shared<Work::State>();
    Work work(state);
    std::atomic<int> calls{0};
    std::atomic<bool> saw_result{false};
    std::atomic<bool> go{false};
    std::thread completer([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      state->Complete(Status(Code::kPeerLost, "gone"), SomeInfo());
    });
    go.store(true, std::memory_order_release);
    work.Then([&, work](const Status& s) {
      const WorkInfo info = work.info();
      saw_result = s.code() == Code::kPeerLost && info.algorithm == "shm_flat" && info.sequence == 7;
      calls.fetch_add(1);
    });
    completer.join();
    ASSERT_EQ(calls.load(), 1) << "round " << round;
    ASSERT_TRUE(saw_result) << "round " << round;
    ASSERT_EQ(work.status().code(), Code::kPeerLost);
  }
}

// Whichever way the race between Then() and Complete() goes, a callback
// registered before Wait() has finished when Wait() returns (a callback the
// completing thread runs keeps it busy for a while, so a waiter released
// early would see it unfinished). A stress test: the window where the order
// matters is a few instructions wide, so it guards the ordering rather than
// proving it (a version that released waiters first passed it too).
TEST(WorkStateTest, WaitNeverReturnsBeforeACallbackRegisteredBeforeIt) {
  for (int round = 0; round < 5000; ++round) {
    auto state = std::make_shared<Work::State>();
    Work work(state);
    std::atomic<bool> go{false};
    std::atomic<bool> finished{false};
    std::thread completer([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      state->Complete(Status::Ok(), SomeInfo());
    });
    go.store(true, std::memory_order_release);
    work.Then([&](const Status&) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      finished = true;
    });
    ASSERT_TRUE(work.Wait().ok());
    ASSERT_TRUE(finished) << "round " << round;
    completer.join();
  }
}

// Callbacks registered before completion have finished when Wait returns,
// and they read the result through the Work while they run.
TEST(WorkStateTest, CallbacksRegisteredBeforeCompletionFinishBeforeWaitReturns) {
  auto state = std::make_shared<Work::State>();
  Work work(state);
  EXPECT_TRUE(work.status().ok());  // running: OK
  EXPECT_EQ(work.info().sequence, 0u);
  std::atomic<bool> finished{false};
  uint64_t seen_sequence = 0;
  work.Then([&, work](const Status&) {
    seen_sequence = work.info().sequence;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    finished = true;
  });
  std::thread completer([&] { state->Complete(Status::Ok(), SomeInfo()); });
  EXPECT_TRUE(work.Wait().ok());
  EXPECT_TRUE(finished);
  EXPECT_EQ(seen_sequence, 7u);
  completer.join();
  EXPECT_DOUBLE_EQ(work.info().seconds, 0.25);
}

// A callback runs on the thread that completes operations: one that throws
// is logged and dropped (it terminated the process), and one that waits for
// an unfinished operation of the same engine gets E100 at once (it waited
// forever: that thread is the one that would run it); another engine's
// operation may be waited for. The later callbacks still run.
TEST(WorkStateTest, CallbacksThatThrowOrWaitDoNotStopTheCompletingThread) {
  int engine = 0, another_engine = 0;  // stand-ins for two communicators' engines
  auto state = std::make_shared<Work::State>();
  state->owner = &engine;
  Work work(state);
  auto other_state = std::make_shared<Work::State>();
  other_state->owner = &engine;
  Work other(other_state);
  auto elsewhere_state = std::make_shared<Work::State>();
  elsewhere_state->owner = &another_engine;
  Work elsewhere(elsewhere_state);
  Status waited, waited_for, waited_elsewhere, own;
  bool last_ran = false;
  work.Then([](const Status&) { throw std::runtime_error("a user's mistake"); });
  work.Then([](const Status&) { throw 42; });
  work.Then([&](const Status&) {
    waited = other.Wait();
    waited_for = other.WaitFor(std::chrono::seconds(10));
    waited_elsewhere = elsewhere.WaitFor(std::chrono::milliseconds(10));
    own = work.Wait();  // its own result is set: returned, not refused
  });
  work.Then([&](const Status&) { last_ran = true; });
  const auto start = std::chrono::steady_clock::now();
  std::thread completer([&] { state->Complete(Status::Ok(), SomeInfo()); });
  EXPECT_TRUE(work.Wait().ok());
  completer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(last_ran);
  for (const Status& s : {waited, waited_for}) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("inside a Then() callback"), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(waited_elsewhere.code(), Code::kCollectiveTimeout) << waited_elsewhere.ToString();
  EXPECT_TRUE(own.ok()) << own.ToString();
  // Outside a callback, the same waits work as usual.
  other_state->Complete(Status::Ok(), SomeInfo());
  EXPECT_TRUE(other.Wait().ok());
}

// Without callbacks, a waiter asleep on the futex is woken.
TEST(WorkStateTest, SleepingWaiterIsWokenByALockFreeCompletion) {
  auto state = std::make_shared<Work::State>();
  Work work(state);
  std::thread completer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    state->Complete(Status(Code::kAborted, "stop"), SomeInfo());
  });
  EXPECT_EQ(work.Wait().code(), Code::kAborted);
  completer.join();
  EXPECT_EQ(work.info().algorithm, "shm_flat");
}

}  // namespace
}  // namespace choir
