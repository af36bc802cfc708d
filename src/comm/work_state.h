// The shared state behind a Work handle.
//
// Thread-safety: Complete() is called once by the thread that ran the
// operation; Wait/Done/status may be called from any thread.
#ifndef CHOIR_COMM_WORK_STATE_H_
#define CHOIR_COMM_WORK_STATE_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "choir/communicator.h"

namespace choir {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  Status status;
  WorkInfo info;
  std::vector<std::function<void(const Status&)>> callbacks;  // Work::Then
  // Set for queued operations: runs queued work on the waiting thread while
  // the engine is idle (Engine::Help). Never called with `mu` held.
  std::function<void()> help;

  // Callbacks run before waiters are released, so that once Wait() returns
  // every callback registered before completion has finished.
  void Complete(Status s, WorkInfo i) {
    std::unique_lock<std::mutex> lock(mu);
    status = std::move(s);
    info = std::move(i);
    while (!callbacks.empty()) {
      std::vector<std::function<void(const Status&)>> run;
      run.swap(callbacks);
      const Status final_status = status;
      lock.unlock();
      for (auto& callback : run) callback(final_status);
      lock.lock();
    }
    done.store(true, std::memory_order_release);
    lock.unlock();
    cv.notify_all();
  }
};

}  // namespace choir

#endif  // CHOIR_COMM_WORK_STATE_H_
