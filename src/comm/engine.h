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
    std::unique_lock<std::mutex> lock(mu_);
    if (busy_ || !queue_.empty()) return false;
    RunAsTheBusyOne(lock, f);
    return true;
  }
  // Runs queued tasks on this thread, oldest first, while `done()` is false
  // and no task is running elsewhere. Returns when done() or when it cannot
  // help (the progress thread is running one, or nothing is queued).
  void Help(const std::function<bool()>& done);
  // Blocks until every submitted task has run.
  void Drain();

 private:
  void Loop();
  // Runs f() as the one operation in progress: marks the engine busy, drops
  // `lock` (held on mu_) around f, then wakes whoever waits for the engine.
  //
  // Wakes the waiters only when one of them can act: the progress thread
  // when something is queued, Drain() callers. Waking the idle progress
  // thread after every inline operation would cost a system call and, with
  // ranks on every core, a preempted rank (tens of microseconds).
  template <typename F>
  void RunAsTheBusyOne(std::unique_lock<std::mutex>& lock, F& f) {
    busy_ = true;
    lock.unlock();
    f();
    lock.lock();
    busy_ = false;
    if (!queue_.empty() || draining_ > 0) cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stop_ = false;
  int draining_ = 0;  // threads in Drain()
  std::thread thread_;
};

}  // namespace choir::comm

#endif  // CHOIR_COMM_ENGINE_H_
