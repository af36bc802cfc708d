#include "comm/work_state.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>
#include <exception>

#include "base/clock.h"
#include "base/logging.h"
#include "transport/endpoint.h"

namespace choir {

void Work::State::Complete(Status s, const CompletionInfo& i) {
  status = std::move(s);
  info = i;
  // Publishes the result, then looks for callbacks; Then() raises
  // has_callbacks, then reads result_set (both sequentially consistent), so
  // a callback Then() queued is seen here and runs before `done` releases
  // the waiters, and Then() runs any later one itself.
  result_set.store(1, std::memory_order_seq_cst);
  if (has_callbacks.load(std::memory_order_seq_cst) != 0) RunCallbacks();
  // Store, then look for sleepers; a sleeper registers, then re-checks
  // `done` (both sequentially consistent), so one of the two sees the other.
  done.store(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&done), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }
}

void Work::State::CompleteUnshared(Status s, const CompletionInfo& i) {
  status = std::move(s);
  info = i;
  result_set.store(1, std::memory_order_release);
  done.store(1, std::memory_order_release);
}

namespace {

// Sanitizers must see every state's memory come and go: recycling is off
// under them (ASan, TSan, MSan, HWASan, with GCC's or clang's spelling).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(__SANITIZE_HWADDRESS__)
#define CHOIR_RECYCLE_WORK_STATES 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer) || \
    __has_feature(hwaddress_sanitizer)
#define CHOIR_RECYCLE_WORK_STATES 0
#endif
#endif
#ifndef CHOIR_RECYCLE_WORK_STATES
#define CHOIR_RECYCLE_WORK_STATES 1
#endif

#if CHOIR_RECYCLE_WORK_STATES

// The blocks this thread keeps for new states: all of one size (the first
// block given back sets it), at most kKept. Trivially destructible, so that
// a state freed while the thread exits, after `t_block_reaper` ran, still
// finds it (closed: blocks go straight back to the heap).
struct BlockStore {
  static constexpr int kKept = 8;
  void* blocks[kKept];
  int count;
  size_t bytes;
  bool closed;
};
thread_local BlockStore t_blocks{};

// Frees the kept blocks when the thread ends.
struct BlockReaper {
  ~BlockReaper() {
    t_blocks.closed = true;
    while (t_blocks.count > 0) ::operator delete(t_blocks.blocks[--t_blocks.count]);
  }
};
thread_local BlockReaper t_block_reaper;

void* TakeBlock(size_t bytes) {
  BlockStore& s = t_blocks;
  if (s.count > 0 && s.bytes == bytes) return s.blocks[--s.count];
  return ::operator new(bytes);
}

void GiveBlock(void* block, size_t bytes) {
  BlockStore& s = t_blocks;
  if (!s.closed && s.count < BlockStore::kKept && (s.count == 0 || s.bytes == bytes)) {
    if (s.count == 0) {
      s.bytes = bytes;
      (void)&t_block_reaper;  // constructed, so that its destructor frees the blocks
    }
    s.blocks[s.count++] = block;
    return;
  }
  ::operator delete(block);
}

// What std::allocate_shared uses for the state and its reference counts
// (one block).
template <class T>
struct RecyclingAllocator {
  using value_type = T;
  RecyclingAllocator() = default;
  template <class U>
  RecyclingAllocator(const RecyclingAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(TakeBlock(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { GiveBlock(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const RecyclingAllocator<U>&) const { return true; }
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "blocks come from plain operator new");
};
#endif  // CHOIR_RECYCLE_WORK_STATES

// The operation whose callbacks this thread is running (null: none). A
// Wait() there for it returns its result (already set); one for another
// operation of its engine would wait for work only this thread can do.
thread_local const Work::State* t_callbacks_state = nullptr;

// Whether waiting for `state` here could never end.
bool WaitWouldDeadlock(const Work::State& state) {
  return t_callbacks_state != nullptr && t_callbacks_state->owner != nullptr &&
         state.owner == t_callbacks_state->owner && state.result_set.load(std::memory_order_acquire) == 0;
}

Status WaitInCallback() {
  return InvalidArgument(
      "Wait()/WaitFor() inside a Then() callback for an unfinished operation of the same communicator: the "
      "callback runs on the thread that runs its operations, so the one it waits for cannot run; wait after "
      "the callback returns");
}

}  // namespace

std::shared_ptr<Work::State> NewWorkState() {
#if CHOIR_RECYCLE_WORK_STATES
  return std::allocate_shared<Work::State>(RecyclingAllocator<Work::State>());
#else
  return std::make_shared<Work::State>();
#endif
}

bool RecyclesWorkStates() { return CHOIR_RECYCLE_WORK_STATES != 0; }

void Work::State::Reset() {
  // Complete() sets status and info afresh; the flags go back to "running".
  // The rest is empty on a finished state run inline (its callbacks ran,
  // and it had no helpers): checking first keeps the small-message path
  // from assigning them every call.
  done.store(0, std::memory_order_relaxed);
  result_set.store(0, std::memory_order_relaxed);
  has_callbacks.store(0, std::memory_order_relaxed);
  failing_in_child.store(0, std::memory_order_relaxed);
  if (!callbacks.empty()) callbacks.clear();
  if (help) help = nullptr;
  if (start) start = nullptr;
}

void Work::State::RunCallbacks() {
  std::unique_lock<std::mutex> lock(mu);
  while (!callbacks.empty()) {
    std::vector<std::function<void(const Status&)>> run;
    run.swap(callbacks);
    lock.unlock();
    const Work::State* outer = t_callbacks_state;
    t_callbacks_state = this;
    for (auto& callback : run) {
      // The thread running operations must survive a callback's mistake.
      try {
        callback(status);
      } catch (const std::exception& e) {
        CHOIR_LOG(Error, COLL, "a Then() callback threw (dropped): {}", e.what());
      } catch (...) {
        CHOIR_LOG(Error, COLL, "a Then() callback threw something that is not a std::exception (dropped)");
      }
    }
    t_callbacks_state = outer;
    lock.lock();
  }
}

bool Work::State::Block(std::chrono::nanoseconds timeout, bool forever) {
  if (is_done()) return true;
  if (!forever && timeout.count() <= 0) return false;
  const int64_t until = forever ? 0 : NowNanos() + timeout.count();
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  // Sequentially consistent like Complete's store: one side sees the other.
  while (done.load(std::memory_order_seq_cst) == 0) {
    timespec ts{};
    if (!forever) {
      const int64_t left = until - NowNanos();
      if (left <= 0) break;
      ts = {static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
    }
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&done), FUTEX_WAIT_PRIVATE, 0, forever ? nullptr : &ts, nullptr, 0);
  }
  sleepers.fetch_sub(1, std::memory_order_relaxed);
  return is_done();
}

Status Work::Wait() const {
  if (!state_) return Status::Ok();
  if (state_->is_done()) return state_->status;
  if (t_callbacks_state == state_.get()) return state_->status;  // from its own callback
  if (WaitWouldDeadlock(*state_)) return WaitInCallback();
  if (state_->help) state_->help();
  state_->Block(std::chrono::nanoseconds(0), /*forever=*/true);
  return state_->status;
}

Status Work::WaitFor(std::chrono::milliseconds timeout) const {
  if (!state_) return Status::Ok();
  if (t_callbacks_state == state_.get()) return state_->status;
  if (WaitWouldDeadlock(*state_)) return WaitInCallback();
  Start();  // this thread does not run it
  // At most a year: longer limits would overflow the nanosecond arithmetic.
  const auto limit = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365));
  if (!state_->Block(std::chrono::duration_cast<std::chrono::nanoseconds>(limit), /*forever=*/false)) {
    return Status(Code::kCollectiveTimeout,
                  "the operation is still running after " + std::to_string(timeout.count()) +
                      " ms (it continues under its own deadline)");
  }
  return state_->status;
}

void Work::Start() const {
  if (state_ && state_->start && !state_->is_done()) state_->start();
}

bool Work::Done() const { return !state_ || state_->is_done(); }

Status Work::status() const {
  if (!state_ || state_->result_set.load(std::memory_order_acquire) == 0) return Status::Ok();
  return state_->status;
}

WorkInfo Work::info() const {
  if (!state_ || state_->result_set.load(std::memory_order_acquire) == 0) return WorkInfo{};
  const CompletionInfo& i = state_->info;
  WorkInfo out;
  if (i.algorithm != nullptr) {
    out.algorithm = i.algorithm;
    if (i.route & transport::kRouteKernelWalk) out.algorithm += "+cma";
    if (i.route & transport::kRouteShared) out.algorithm += "+shared";
    if (i.route & transport::kRoutePipeWalk) out.algorithm += "+pipe";
  }
  out.streaming_stages = (i.route & transport::kRouteStreamingStages) != 0;
  out.sequence = i.sequence;
  out.seconds = i.seconds;
  out.timed = i.timed;
  out.source_rank = i.source_rank;
  return out;
}

void Work::Then(std::function<void(const Status&)> callback) const {
  if (!state_) {
    callback(Status::Ok());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->has_callbacks.store(1, std::memory_order_seq_cst);
    if (state_->result_set.load(std::memory_order_seq_cst) == 0) {
      state_->callbacks.push_back(std::move(callback));
      return;
    }
  }
  callback(state_->status);
}

}  // namespace choir
