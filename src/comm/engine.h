// The progress engine of one communicator: runs operations one at a time,
// in the order they were issued.
//
// An operation issued while nothing is queued or running, and no larger than
// the async threshold (CHOIR_ASYNC_BYTES), runs right away on the caller's
// thread: small collectives pay no thread hand-off. Everything else is queued
// for the communicator's progress thread, started on first need. A thread
// that waits for a queued operation helps: while the engine is idle it runs
// the queued operations itself, in order, until its own is done, so the
// common "issue, then wait" pattern pays no hand-off either.
//
// Thread-safety: Submit and RunExclusive may be called from any thread.
#ifndef CHOIR_COMM_ENGINE_H_
#define CHOIR_COMM_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace choir::comm {

class Engine {
 public:
  using Task = std::function<void()>;
  Engine() = default;
  ~Engine();  // runs what is queued, then joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs `task` inline when allowed and idle, else queues it.
  void Submit(Task task, bool may_run_inline);
  // Runs `task` now on this thread if no operation is running or queued and
  // returns true; otherwise returns false without running it.
  bool TryRunExclusive(const Task& task);
  // The same for any callable, without wrapping it in a Task (no allocation:
  // the small-message path).
  template <typename F>
  bool TryRunInline(F&& f) {
    // Without the mutex: one compare-and-swap to claim the engine and one
    // store to release it (the mutex cost four locked instructions per
    // small collective). A task queued between the check and the claim waits
    // for this one; only tasks from different threads can race like that,
    // and their order was never defined.
    if (queued_.load(std::memory_order_seq_cst) != 0 || !Claim()) return false;
    f();
    Release();
    return true;
  }
  // Runs queued tasks on this thread, oldest first, while `done()` is false
  // and no task is running elsewhere. Returns when done() or when it cannot
  // help (the progress thread is running one, or nothing is queued).
  void Help(const std::function<bool()>& done);
  // Blocks until every submitted task has run.
  void Drain();
  // Something waits in the queue (a long task may return early for it).
  bool has_queued() const { return queued_.load(std::memory_order_seq_cst) != 0; }
  // True on a thread inside Help() whose `done()` already holds: a task it
  // runs there may stop early and leave the rest to the queue.
  static bool HelperDone();

 private:
  void Loop();
  bool Claim() {
    bool idle = false;
    return busy_.compare_exchange_strong(idle, true, std::memory_order_seq_cst);
  }
  // Marks the engine idle, then wakes whoever waits for it, but only when
  // one of them can act: the progress thread when something is queued,
  // Drain() callers. Waking the idle progress thread after every inline
  // operation would cost a system call and, with ranks on every core, a
  // preempted rank (tens of microseconds). The store and the loads are
  // sequentially consistent, like Submit's increment of queued_ and Drain's
  // of draining_, so a waiter that found the engine busy is always woken:
  // it checked busy_ under mu_, which this takes before notifying.
  void Release() {
    busy_.store(false, std::memory_order_seq_cst);
    if (queued_.load(std::memory_order_seq_cst) != 0 || draining_.load(std::memory_order_seq_cst) != 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  }
  // Runs the oldest queued task as the one operation in progress if it can
  // claim the engine (`lock` held on mu_, dropped around the task); false
  // when an inline operation holds it.
  bool RunOldest(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;            // guarded by mu_
  std::atomic<size_t> queued_{0};     // queue_.size(), readable without mu_
  std::atomic<bool> busy_{false};     // an operation is running
  bool stop_ = false;                 // guarded by mu_
  std::atomic<int> draining_{0};      // threads in Drain()
  std::thread thread_;
};

}  // namespace choir::comm

#endif  // CHOIR_COMM_ENGINE_H_
