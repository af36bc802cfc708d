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

#include "choir/communicator.h"

namespace choir {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  Status status;
  WorkInfo info;
  std::function<void()> on_complete;  // set by integrations before the op may finish

  void Complete(Status s, WorkInfo i) {
    std::function<void()> callback;
    {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(s);
      info = std::move(i);
      done.store(true, std::memory_order_release);
      callback = std::move(on_complete);
    }
    cv.notify_all();
    if (callback) callback();
  }
};

}  // namespace choir

#endif  // CHOIR_COMM_WORK_STATE_H_
