#include "comm/engine.h"

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
      if (queue_.empty()) break;
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(queue_.size(), std::memory_order_seq_cst);
    }
    task();
  }
}

void Engine::Submit(Task task, bool may_run_inline) {
  if (may_run_inline && TryRunInline(task)) return;
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(task));
  queued_.store(queue_.size(), std::memory_order_seq_cst);
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
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

void Engine::Help(const std::function<bool()>& done) {
  const std::function<bool()>* outer = t_help_done;
  t_help_done = &done;
  std::unique_lock<std::mutex> lock(mu_);
  while (!done() && RunOldest(lock)) {
  }
  lock.unlock();
  t_help_done = outer;
}

void Engine::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  draining_.fetch_add(1, std::memory_order_seq_cst);
  cv_.wait(lock, [&] { return !busy_.load(std::memory_order_seq_cst) && queue_.empty(); });
  draining_.fetch_sub(1, std::memory_order_seq_cst);
}

void Engine::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (!busy_.load(std::memory_order_seq_cst) && !queue_.empty()); });
    if (RunOldest(lock)) continue;
    if (stop_) return;  // queue empty, or an inline operation runs: the destructor runs the rest
  }
}

}  // namespace choir::comm
