#include "comm/engine.h"

#include <sched.h>

namespace choir::comm {

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Tasks queued after the thread left (or with no thread) still run: each
  // completes its Work, with an error if the communicator is gone.
  while (true) {
    Task task;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty() && !background_) break;
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
        queued_.store(queue_.size(), std::memory_order_seq_cst);
      } else {
        task = std::move(background_);
        background_ = nullptr;
      }
    }
    task();
  }
}

void Engine::SubmitBackground(Task task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (background_) return;
  background_ = std::move(task);
  background_since_ = std::chrono::steady_clock::now();
  last_background_ = background_since_;
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  // A progress thread on its timer finds it without a wake-up (which would
  // cost a context switch on every pending send or receive).
  if (!on_timer_) cv_.notify_all();
}

bool Engine::RunBackground(std::unique_lock<std::mutex>& lock) {
  if (!background_ || !Claim()) return false;
  Task task = std::move(background_);
  background_ = nullptr;
  lock.unlock();
  task();
  Release();
  lock.lock();
  return true;
}

void Engine::Submit(Task task, bool may_run_inline) {
  if (may_run_inline && TryRunInline(task)) return;
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(task));
  queued_.store(queue_.size(), std::memory_order_seq_cst);
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  if (!shares_cpu_) {
    cv_.notify_all();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (queue_.size() == 1) queued_since_ = now;
  last_submit_ = now;
  // On its timer the progress thread finds the operation itself; a wake-up
  // would switch this CPU over to it at once.
  if (!on_timer_) cv_.notify_all();
}

void Engine::StartQueued() {
  if (!shares_cpu_) return;  // the progress thread was woken when they were queued
  std::lock_guard<std::mutex> lock(mu_);
  const auto due = std::chrono::steady_clock::now() - kPickupDelay;
  if (queue_.empty() || queued_since_ <= due) return;
  queued_since_ = due;
  cv_.notify_all();
}

bool Engine::TryRunExclusive(const Task& task) { return TryRunInline(task); }

bool Engine::RunOldest(std::unique_lock<std::mutex>& lock) {
  if (queue_.empty() || !Claim()) return false;
  Task task = std::move(queue_.front());
  queue_.pop_front();
  queued_.store(queue_.size(), std::memory_order_seq_cst);
  lock.unlock();
  task();
  Release();
  lock.lock();
  return true;
}

namespace {
thread_local const std::function<bool()>* t_help_done = nullptr;  // Help()'s predicate on this thread
}  // namespace

bool Engine::HelperDone() { return t_help_done != nullptr && (*t_help_done)(); }
bool Engine::OnHelperThread() { return t_help_done != nullptr; }

void Engine::Help(const std::function<bool()>& done) {
  const std::function<bool()>* outer = t_help_done;
  t_help_done = &done;
  helpers_.fetch_add(1, std::memory_order_seq_cst);
  std::unique_lock<std::mutex> lock(mu_);
  while (!done()) {
    if (RunOldest(lock) || RunBackground(lock)) continue;
    if (!busy_.load(std::memory_order_seq_cst)) {
      if (queue_.empty() && !background_) break;  // nothing runs and nothing is left to run here
      continue;
    }
    // A task runs on another thread: ask it to give the engine back, then
    // wait for the engine, briefly by polling (a point-to-point drive gives
    // it back as soon as it sees the request), then on the condition
    // (Release and NotifyHelpers notify while helpers wait).
    waiting_helpers_.fetch_add(1, std::memory_order_seq_cst);
    if (wake_) wake_();  // under mu_: after Drain() nothing is busy, so a destroyed owner is never called
    lock.unlock();
    // Sharing its CPU, the task runs only when this thread gives it up.
    const int spins = shares_cpu_ ? 0 : 100;
    for (int i = 0; i < 2000 && busy_.load(std::memory_order_seq_cst) && !done(); ++i) {
      if (i < spins) {
        for (int k = 0; k < 16; ++k) __builtin_ia32_pause();
      } else {
        sched_yield();
      }
    }
    lock.lock();
    cv_.wait(lock, [&] { return !busy_.load(std::memory_order_seq_cst) || done(); });
    waiting_helpers_.fetch_sub(1, std::memory_order_seq_cst);
  }
  helpers_.fetch_sub(1, std::memory_order_seq_cst);
  bool leftover = !queue_.empty() || background_;
  if (shares_cpu_ && !queue_.empty()) {
    // The operations this helper leaves may have waited long already: the
    // next caller to wait gets the same grace (else the progress thread
    // would take the next one the moment this helper leaves, the hand-off
    // the delay avoids), and a thread on its timer finds them itself.
    queued_since_ = std::chrono::steady_clock::now();
    if (on_timer_ && !background_) leftover = false;
  }
  lock.unlock();
  if (leftover) cv_.notify_all();  // the progress thread takes over
  t_help_done = outer;
}

void Engine::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  draining_.fetch_add(1, std::memory_order_seq_cst);
  cv_.notify_all();  // the progress thread runs the background task at once now
  cv_.wait(lock, [&] { return !busy_.load(std::memory_order_seq_cst) && queue_.empty() && !background_; });
  draining_.fetch_sub(1, std::memory_order_seq_cst);
}

void Engine::Loop() {
  using Clock = std::chrono::steady_clock;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // While threads wait in Help() they run the queue themselves.
    const bool idle = !busy_.load(std::memory_order_seq_cst) && helpers_.load(std::memory_order_seq_cst) == 0;
    const auto now = Clock::now();
    // With a deferred pickup, a queued operation waits a little for its
    // caller (set_shares_cpu), unless the engine stops or drains.
    const bool pickup = !shares_cpu_ || stop_ || draining_.load(std::memory_order_seq_cst) != 0 ||
                        now >= queued_since_ + kPickupDelay;
    if (idle && pickup && RunOldest(lock)) continue;
    if (stop_) return;  // queue empty, or an inline operation runs: the destructor runs the rest
    // The background task only once nobody took it for a while (a thread
    // that waits for a pending operation runs it itself, without a
    // hand-off), or at once when a Drain() waits for it.
    if (idle && background_ &&
        (draining_.load(std::memory_order_seq_cst) != 0 || now >= background_since_ + kBackgroundDelay)) {
      RunBackground(lock);
      continue;
    }
    // Sleep: on a timer while background work or deferred operations came
    // lately (so that SubmitBackground and Submit need not wake this
    // thread), or while a deferred operation waits on an idle engine (one a
    // helper left behind after a long operation would otherwise wait for the
    // next Submit), else until notified (Release notifies while operations
    // are queued, and a helper that leaves while this thread is off its
    // timer).
    if (background_ || now - last_background_ < kTimerFor ||
        (shares_cpu_ && (now - last_submit_ < kTimerFor || (idle && !queue_.empty())))) {
      on_timer_ = true;
      auto until = now + kTimerTick;
      if (idle && background_) until = std::min(until, background_since_ + kBackgroundDelay);
      if (idle && !queue_.empty()) until = std::min(until, queued_since_ + kPickupDelay);
      cv_.wait_until(lock, until);
    } else {
      on_timer_ = false;
      cv_.wait(lock);
    }
  }
}

}  // namespace choir::comm
