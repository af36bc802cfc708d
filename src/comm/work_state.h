// The shared state behind a Work handle.
//
// Completion is a futex word: waiting costs nothing when the operation is
// already done (the small-message path, run inline before Wait), and the
// completing thread makes a system call only when someone sleeps on it.
// What WorkInfo reports is kept as plain fields and turned into a WorkInfo
// only when asked (Work::info), so completing allocates nothing.
//
// Thread-safety: Complete() is called once by the thread that ran the
// operation; Wait/Done/status may be called from any thread.
#ifndef CHOIR_COMM_WORK_STATE_H_
#define CHOIR_COMM_WORK_STATE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "choir/communicator.h"

namespace choir {

// WorkInfo's fields, filled by the thread that runs the operation.
struct CompletionInfo {
  const char* algorithm = nullptr;  // registry name (static storage); null: none
  uint8_t route = 0;                // transport::RouteBit: "+cma", "+shared" after the name; streaming stages
  uint64_t sequence = 0;
  double seconds = 0;
  bool timed = false;  // `seconds` was measured (CommMetrics::TimeThisCall)
  int source_rank = -1;
};

struct Work::State {
  std::mutex mu;                   // guards callbacks
  std::atomic<uint32_t> done{0};   // 1 once complete (futex word)
  std::atomic<uint32_t> sleepers{0};
  // Written once by Complete, then published by `result_set` (before the
  // callbacks run, which may read them) and `done`; never changed after, so
  // readers that saw either flag read them without the lock.
  Status status;
  CompletionInfo info;
  std::atomic<uint32_t> result_set{0};
  // Raised by Then() (under `mu`) before it checks `result_set`; Complete
  // looks at it after raising `result_set` and before raising `done`, so a
  // queued callback always runs before waiters are released, and an
  // operation nobody registered a callback for completes without taking the
  // lock (two locked instructions less on the small-message path).
  std::atomic<uint32_t> has_callbacks{0};
  std::vector<std::function<void(const Status&)>> callbacks;  // Work::Then
  // Set for queued operations: runs queued work on the waiting thread while
  // the engine is idle (Engine::Help). Never called with `mu` held.
  std::function<void()> help;
  // Set for queued operations: lets the progress thread take them at once
  // (Engine::StartQueued).
  std::function<void()> start;
  // The engine that runs this operation (null: none, a test's state). A
  // callback running for one of its operations must not wait for another of
  // them: only that engine's thread would run it.
  const void* owner = nullptr;
  // In a forked child, the first of the threads that wait for an operation
  // the parent queued completes it with the error (comm_impl.cc).
  std::atomic<uint32_t> failing_in_child{0};

  bool is_done() const { return done.load(std::memory_order_acquire) != 0; }
  // Callbacks run before waiters are released, so that once Wait() returns
  // every callback registered before completion has finished.
  void Complete(Status s, const CompletionInfo& i);
  // Complete for a state no other thread can reach yet (an operation run
  // inline, before its Work is returned): nobody can have registered a
  // callback or gone to sleep on it, and whoever gets the Work later gets it
  // through a synchronizing hand-off, so plain stores do (two locked
  // instructions less than Complete on the small-message path).
  void CompleteUnshared(Status s, const CompletionInfo& i);
  // Runs the queued callbacks (and any queued while they run).
  void RunCallbacks();
  // Makes a finished state ready for another operation: not done, no
  // callbacks, no helpers (status and info wait for Complete to set them
  // again; the owner stays). Only for a state whose one holder is the
  // caller, which made every earlier holder's accesses happen before this
  // call (CommImpl::TakeInlineState).
  void Reset();
  // Blocks until done, or (unless `forever`) until `timeout` passes (at
  // once when it is not positive); true if done.
  bool Block(std::chrono::nanoseconds timeout, bool forever);
};

// A new state for one operation. Its memory comes from a small per-thread
// store of blocks that earlier states on this thread gave back, so a loop of
// small collectives does not go through malloc and free every call (about
// 150 of the small-message path's instructions: docs/performance-log.md,
// "The small-call path, counted"). A state freed on another thread goes to
// that thread's store. Sanitizer builds allocate every state afresh, so that
// a use after free is still caught.
std::shared_ptr<Work::State> NewWorkState();
// Whether NewWorkState recycles blocks in this build (false under sanitizers).
bool RecyclesWorkStates();

}  // namespace choir

#endif  // CHOIR_COMM_WORK_STATE_H_
