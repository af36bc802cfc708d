// The progress engine of one communicator: runs operations one at a time,
// in the order they were issued.
//
// An operation issued while nothing is queued or running, and no larger than
// the async threshold (CHOIR_ASYNC_BYTES), runs right away on the caller's
// thread: small collectives pay no thread hand-off. Everything else is queued
// for the communicator's progress thread, started on first need. A thread
// that waits for a queued operation helps: while the engine is idle it runs
// the queued operations itself, in order, until its own is done, so the
// common "issue, then wait" pattern pays no hand-off either; while such
// helpers wait, the progress thread leaves the queue to them. One background
// task (pending point-to-point progress) can wait beside the queue without
// counting as queued: helpers run it at once, the progress thread only when
// nobody took it within kBackgroundDelay. When the progress thread would
// share the caller's CPU (set_shares_cpu), it also leaves queued operations
// to a waiting caller for kPickupDelay, and helpers do not spin.
//
// Thread-safety: Submit and RunExclusive may be called from any thread.
#ifndef CHOIR_COMM_ENGINE_H_
#define CHOIR_COMM_ENGINE_H_

#include <atomic>
#include <chrono>
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
  // Sets the background task (at most one: a second call while one waits is
  // ignored): work nobody waits for yet, such as driving pending
  // point-to-point transfers. It does not count as queued (operations still
  // run inline past it); a thread in Help() runs it at once, the progress
  // thread only once it has waited kBackgroundDelay with nothing else to do
  // and nobody helping, so that the common "post, then wait" costs no
  // hand-off. It must return soon when has_queued() or, on the progress
  // thread, helpers_waiting() (the task's own check).
  void SubmitBackground(Task task);
  static constexpr std::chrono::microseconds kBackgroundDelay{200};
  // For a rank whose progress thread has no CPU of its own (bound to one
  // CPU, or the host's ranks with their progress threads outnumber the CPUs
  // they may use: comm/bootstrap.cc): the progress thread takes a queued
  // operation only kPickupDelay after it was queued, and Submit does not wake
  // a progress thread that sleeps on its timer. A caller that waits sooner
  // runs the operation itself, without the two context switches of a
  // hand-off; one that does not wait finds it started within the delay (or
  // a timer tick). A thread in Help() then yields at once instead of
  // spinning. Set before any operation is submitted.
  void set_shares_cpu(bool shares) { shares_cpu_ = shares; }
  static constexpr std::chrono::microseconds kPickupDelay{100};
  // Lets the progress thread take what is queued now, without the pickup
  // delay: for an operation whose caller will not wait in Help() (it waits
  // with a timeout, through a callback or future, or polls).
  void StartQueued();
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
  // Runs queued tasks on this thread, oldest first, until `done()`. While a
  // task runs elsewhere it waits for the engine (asking a task that can give
  // it back, such as pending point-to-point progress, to do so: `wake`, set
  // by set_wake), and while helpers wait the progress thread takes no task,
  // so the thread that waits drives its own operation and wakes up without
  // a hand-off. Returns when done(), or when nothing is queued or running.
  void Help(const std::function<bool()>& done);
  // Called (by a helper, under the engine's mutex) when a helper finds the
  // engine busy: rouses a task that sleeps waiting for peers so that it can
  // give the engine back. Set before any operation is submitted.
  void set_wake(std::function<void()> wake) { wake_ = std::move(wake); }
  // Wakes threads that wait in Help() for a busy engine, so that one whose
  // operation a running task just completed returns at once (a
  // point-to-point drive completes operations without ending).
  void NotifyHelpers() {
    if (waiting_helpers_.load(std::memory_order_seq_cst) != 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  }
  // Threads inside Help(): a long task gives the engine back to them.
  bool helpers_waiting() const { return helpers_.load(std::memory_order_seq_cst) != 0; }
  // Blocks until every submitted task has run.
  void Drain();
  // Something waits in the queue (a long task may return early for it).
  bool has_queued() const { return queued_.load(std::memory_order_seq_cst) != 0; }
  // True on a thread inside Help() whose `done()` already holds: a task it
  // runs there may stop early and leave the rest to the queue.
  static bool HelperDone();
  // True on a thread inside Help().
  static bool OnHelperThread();

 private:
  void Loop();
  bool Claim() {
    bool idle = false;
    return busy_.compare_exchange_strong(idle, true, std::memory_order_seq_cst);
  }
  // Marks the engine idle, then wakes whoever waits for it, but only when
  // one of them can act: the progress thread when something is queued,
  // Drain() callers, threads in Help() waiting for the engine. Waking the
  // idle progress thread after every inline operation would cost a system
  // call and, with ranks on every core, a preempted rank (tens of
  // microseconds). The store and the loads are
  // sequentially consistent, like Submit's increment of queued_ and Drain's
  // of draining_, so a waiter that found the engine busy is always woken:
  // it checked busy_ under mu_, which this takes before notifying.
  void Release() {
    busy_.store(false, std::memory_order_seq_cst);
    if (queued_.load(std::memory_order_seq_cst) != 0 || draining_.load(std::memory_order_seq_cst) != 0 ||
        waiting_helpers_.load(std::memory_order_seq_cst) != 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  }
  // Runs the oldest queued task as the one operation in progress if it can
  // claim the engine (`lock` held on mu_, dropped around the task); false
  // when an inline operation holds it.
  bool RunOldest(std::unique_lock<std::mutex>& lock);
  // The same for the background task.
  bool RunBackground(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;            // guarded by mu_
  std::atomic<size_t> queued_{0};     // queue_.size(), readable without mu_
  std::atomic<bool> busy_{false};     // an operation is running
  bool stop_ = false;                 // guarded by mu_
  std::atomic<int> draining_{0};      // threads in Drain()
  std::atomic<int> helpers_{0};       // threads in Help()
  std::function<void()> wake_;        // set before any task runs
  std::atomic<int> waiting_helpers_{0};  // helpers waiting for the engine to be released
  Task background_;                   // guarded by mu_ (empty: none)
  std::chrono::steady_clock::time_point background_since_;  // guarded by mu_
  std::chrono::steady_clock::time_point last_background_;   // guarded by mu_
  bool on_timer_ = false;             // guarded by mu_: the progress thread sleeps on a timer
  bool shares_cpu_ = false;           // set before the first Submit
  std::chrono::steady_clock::time_point queued_since_;  // guarded by mu_: when queue_ last became non-empty
  std::chrono::steady_clock::time_point last_submit_;   // guarded by mu_
  static constexpr std::chrono::milliseconds kTimerTick{1};
  static constexpr std::chrono::milliseconds kTimerFor{100};
  std::thread thread_;
};

}  // namespace choir::comm

#endif  // CHOIR_COMM_ENGINE_H_
