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
    }
    task();
  }
}

void Engine::Submit(Task task, bool may_run_inline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (may_run_inline && !busy_ && queue_.empty()) {
    RunAsTheBusyOne(lock, task);
    return;
  }
  queue_.push_back(std::move(task));
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  cv_.notify_all();
}

bool Engine::TryRunExclusive(const Task& task) { return TryRunInline(task); }

void Engine::Help(const std::function<bool()>& done) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!done() && !busy_ && !queue_.empty()) {
    Task task = std::move(queue_.front());
    queue_.pop_front();
    RunAsTheBusyOne(lock, task);
  }
}

void Engine::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  ++draining_;
  cv_.wait(lock, [&] { return !busy_ && queue_.empty(); });
  --draining_;
}

void Engine::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (!busy_ && !queue_.empty()); });
    if (queue_.empty() || busy_) {
      if (stop_) return;
      continue;
    }
    Task task = std::move(queue_.front());
    queue_.pop_front();
    RunAsTheBusyOne(lock, task);
  }
}

}  // namespace choir::comm
