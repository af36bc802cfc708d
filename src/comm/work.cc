#include "comm/work_state.h"

namespace choir {

Status Work::Wait() const {
  if (!state_) return Status::Ok();
  if (state_->done.load(std::memory_order_acquire)) return state_->status;
  if (state_->help) state_->help();
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done.load(std::memory_order_acquire); });
  return state_->status;
}

Status Work::WaitFor(std::chrono::milliseconds timeout) const {
  if (!state_) return Status::Ok();
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done.load(std::memory_order_acquire); })) {
    return Status(Code::kCollectiveTimeout,
                  "the operation is still running after " + std::to_string(timeout.count()) +
                      " ms (it continues under its own deadline)");
  }
  return state_->status;
}

bool Work::Done() const { return !state_ || state_->done.load(std::memory_order_acquire); }

Status Work::status() const {
  if (!state_) return Status::Ok();
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->status;
}

WorkInfo Work::info() const {
  if (!state_) return WorkInfo{};
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->info;
}

void Work::Then(std::function<void(const Status&)> callback) const {
  if (!state_) {
    callback(Status::Ok());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done.load(std::memory_order_acquire)) {
      state_->callbacks.push_back(std::move(callback));
      return;
    }
  }
  callback(state_->status);
}

}  // namespace choir
