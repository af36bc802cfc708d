// Endpoint: this rank's channels to every peer of one communicator, and the
// loop that drives a set of Xfers to completion.
//
// Run() makes progress on every posted send and receive at once, so a ring
// step (send right, receive left) cannot deadlock on full buffers. When
// nothing moves it spins for a moment (CHOIR_SPIN_US), then yields, then
// sleeps: on the shared-memory doorbell when only local peers are involved,
// on epoll when TCP peers are. Sleeping is capped so that it can notice a dead
// local peer, a peer's abort record, a local Abort() request, a stall worth
// reporting, and the deadline.
//
// Point-to-point messages that arrive while the rank expects a collective
// message (or another tag) are stashed and matched later.
//
// Thread-safety: Run() is called by one thread at a time (the communicator's
// engine serializes operations). RequestAbort() may be called from any thread.
#ifndef CHOIR_TRANSPORT_ENDPOINT_H_
#define CHOIR_TRANSPORT_ENDPOINT_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <absl/functional/function_ref.h>

#include "base/clock.h"
#include "base/fd.h"
#include "choir/status.h"
#include "transport/channel.h"
#include "transport/shm/local_group.h"
#include "transport/shm/segment.h"
#include "transport/xfer.h"

namespace choir::diag {
class CommMetrics;
}

namespace choir::transport {

// What the communicator contributes while an operation waits. An interface
// rather than std::function members: setting one up must not allocate on the
// small-message path.
class RunObserver {
 public:
  // Builds the CollectiveMismatch status when a peer's header differs from the expected one.
  virtual Status Mismatch(const MsgHeader& expected, const MsgHeader& got, int peer) = 0;
  // Called about every `stall_seconds` while nothing moves; may return an error to stop waiting.
  virtual Status Stall(double waited_seconds) = 0;

 protected:
  ~RunObserver() = default;
};

// RunHooks::route bits, shown after the algorithm's name in this order.
enum RouteBit : uint8_t {
  kRouteKernelWalk = 1,  // "+cma": a same-host walk chose the kernel copy at run time
  kRouteShared = 2,      // "+shared": read or wrote a peer's SharedBuffer directly
  kRouteStreamingStages = 4,  // not in the name: WorkInfo::streaming_stages
  kRoutePipeWalk = 8,    // "+pipe": a same-host walk went through the pipe instead (cma's in-place alltoall)
};

struct RunHooks {
  Deadline deadline = Deadline::Infinite();
  RunObserver* observer = nullptr;
  double stall_seconds = 0;  // 0 = never
  // When the wait began (NowNanos()), if before this Run: point-to-point
  // progress restarts Run often, and a timeout names the whole wait.
  int64_t waiting_since_ns = 0;
  // Set (if not null and still 0) to the time the first peer data arrived
  // (OpNanos(), the operation clock).
  int64_t* first_data_ns = nullptr;
  // Route bits (if not null) the operation's algorithm sets when how it
  // moved the data is worth naming after it (WorkInfo::algorithm).
  uint8_t* route = nullptr;
  // Early returns (point-to-point progress, comm/p2p.cc): Run returns OK
  // with Xfers still incomplete after a pass that completed one
  // (`return_on_completion`), once nothing moved for the spinning part of
  // the wait policy (`return_when_idle`: at once when ranks compete for
  // CPUs), or when `return_when` (checked after every pass that left work,
  // and again just before sleeping) says so. Wake() rouses a sleeping Run so
  // that it checks `return_when` at once.
  bool return_on_completion = false;
  bool return_when_idle = false;
  const std::function<bool()>* return_when = nullptr;
};

// How a rank waits for its peers: busy-poll for `spin_ns` (peers that arrive
// within microseconds cost no system call), then poll between sched_yield()
// calls until `yield_ns` (on a busy or oversubscribed machine this hands the
// CPU to the very peer being waited for), then sleep on a futex or epoll.
struct WaitPolicy {
  int64_t spin_ns = 2000;
  int64_t yield_ns = 200000;

  enum class Step { kSpin, kYield, kSleep };
  Step Next(int64_t waited_ns) const {
    if (waited_ns < spin_ns) return Step::kSpin;
    if (waited_ns < yield_ns) return Step::kYield;
    return Step::kSleep;
  }
};

// Whether the ranks of a host compete for CPUs, so that a waiting rank must
// not spin (WaitPolicy::spin_ns = 0). Each rank counts as one CPU's worth of
// work spread over the CPUs it may use (`cpus_of_ranks`, its affinity) and
// they compete when some CPU gets more than one: ranks a launcher bound one
// per CPU do not, though each sees a single CPU; ranks stacked on the same
// CPUs do. When some rank's affinity is unknown (empty), ranks are counted
// against `online_cpus`. With `threads_per_rank` = 2 it asks whether each
// rank's progress thread, busy beside its caller, finds a CPU of its own.
bool RanksCompeteForCpus(const std::vector<std::vector<int>>& cpus_of_ranks, int online_cpus,
                         int threads_per_rank = 1);

class Endpoint {
 public:
  // channels[r] talks to rank r (null for this rank). `own_segment` (may be null)
  // holds this rank's doorbell; peer segments are owned here to keep them mapped.
  Endpoint(int rank, int size, std::vector<std::unique_ptr<Channel>> channels,
           std::unique_ptr<Segment> own_segment, std::vector<std::unique_ptr<Segment>> peer_segments,
           WaitPolicy policy);
  ~Endpoint();

  int rank() const { return rank_; }
  int size() const { return size_; }
  Channel* channel(int peer) const { return channels_[static_cast<size_t>(peer)].get(); }
  // Transport used for `peer` (this rank: shm).
  TransportKind kind(int peer) const;

  // Drives `xfers` until all are complete, or returns the first error: a
  // peer's failure, a mismatch, Aborted after RequestAbort(), or
  // CollectiveTimeout naming the peers still owing data.
  Status Run(std::span<Xfer> xfers, const RunHooks& hooks);

  // Rouses a Run() that sleeps waiting for its peers, so that it checks
  // RunHooks::return_when (any thread; costs a system call or two).
  void Wake();

  // Asks a running Run() to stop with `status` (any thread).
  void RequestAbort(const Status& status);
  // Tells every peer that this rank failed (call from the thread that runs
  // operations, or when none runs).
  void BroadcastAbort(const Status& status);

  // Unlinks this rank's segment name (after every peer has mapped it).
  void UnlinkSegment();

  // Same-host group for the shared-area algorithms, or null.
  LocalGroup* local() { return local_.get(); }
  void set_local(std::unique_ptr<LocalGroup> local) { local_ = std::move(local); }
  // Blocks until no local peer owes(i) anything (i: index in the local
  // group), with the same spin/yield/sleep policy, deadline, abort and
  // dead-peer checks as Run(); a peer that left the communicator while it
  // still owes is an error at once. `waiting_for` describes, for a timeout
  // message, what is still missing. With `marks_data`, a wait that lasted
  // beyond the first polls sets hooks.first_data_ns (the late-arrival metric;
  // a wait that short counts as none, and costs no clock read). The
  // callables are borrowed for the call (absl::FunctionRef: no allocation,
  // whatever they capture: this is every small collective's path).
  Status WaitLocal(absl::FunctionRef<bool(int)> owes, const RunHooks& hooks,
                   absl::FunctionRef<std::string()> waiting_for, bool marks_data = false);
  // Replaces a PeerLost by the abort report of the rank that failed first, if one arrived.
  Status Explain(const Status& status);
  // Where per-peer traffic is counted (once per finished Xfer).
  void set_metrics(diag::CommMetrics* metrics) { metrics_ = metrics; }
  // Counts bytes this rank read from a local peer's memory (shared-area algorithms).
  void CountSharedRead(int peer, uint64_t bytes);

 private:
  // `skip` (size() entries, for a receive from any source) leaves out the
  // peers it must not take a message from now.
  Result<bool> Step(Xfer& x, const RunHooks& hooks, const uint8_t* skip = nullptr);
  // Whether point-to-point receive xfers[i] may move in this pass, so that
  // messages match receives in posted order: a receive from a named peer not
  // while another receive is halfway through a message on that channel, nor
  // while an earlier open receive could take the same message (same tag, a
  // sender both accept). A receive from any source not behind an earlier
  // one from any source with its tag; `skip` gets the peers it must leave
  // alone (mid-message, or claimed for its tag by an earlier receive).
  static bool P2PReceiveMayMove(std::span<const Xfer> xfers, size_t i, const std::vector<uint8_t>& mid_message,
                                std::vector<uint8_t>& skip);
  Result<bool> StepRecv(Xfer& x, Channel& ch, const RunHooks& hooks);
  Result<bool> StepAnySource(Xfer& x, const RunHooks& hooks, const uint8_t* skip);
  Result<bool> ContinueStash(Channel& ch);
  // A stashed message with x's tag from `peer`, copied into x (false: none
  // yet); CollectiveMismatch when it holds another data type.
  Result<bool> TakeFromStash(Xfer& x, int peer);
  Status P2PTypeMismatch(uint64_t sent, const Xfer& x, const std::string& from) const;
  Status ReadAbortMessage(Channel& ch);
  // The error for a receive from a peer whose bye has arrived.
  Status Departed(const Channel& ch, const Xfer& x) const;
  Status CheckPeers(std::span<Xfer> xfers);
  Status Timeout(std::span<Xfer> xfers, double waited) const;
  void WaitTcp(const RunHooks& hooks, bool shm_pending);

  const int rank_;
  const int size_;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::unique_ptr<Segment> own_segment_;
  std::vector<std::unique_ptr<Segment>> peer_segments_;
  WaitPolicy policy_;
  Fd epoll_fd_;
  Fd wake_fd_;  // an eventfd in the epoll set: Wake() for a Run waiting on TCP peers
  bool has_tcp_ = false;          // some peer is reached over TCP
  int64_t last_peer_check_ns_ = 0;  // when Run last looked for dead peers (Run's thread)
  // Run's per-pass scratch (Run's thread).
  std::vector<int> run_first_send_, run_first_recv_, run_p2p_moved_;
  std::vector<uint8_t> run_mid_message_, run_any_skip_;

  struct Stashed {
    uint64_t tag;
    uint64_t sig;  // the sender's data type
    std::vector<uint8_t> data;
  };
  struct StashInProgress {
    bool active = false;
    Xfer xfer;
    std::vector<uint8_t> data;
  };
  std::vector<std::deque<Stashed>> stash_;          // per peer, completed P2P messages
  std::vector<StashInProgress> stash_progress_;     // per peer

  diag::CommMetrics* metrics_ = nullptr;
  std::unique_ptr<LocalGroup> local_;
  std::atomic<bool> abort_requested_{false};
  Status abort_status_;  // written before abort_requested_ is set
};

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_ENDPOINT_H_
