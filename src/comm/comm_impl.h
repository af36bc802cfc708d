// CommImpl: everything behind a Communicator handle.
//
// It owns the transport endpoint, the progress engine, the sequence counter
// and the sticky error. Each operation is validated in the caller's thread,
// then executed by the engine: select an algorithm, run it with a deadline,
// and on failure record the error and tell the peers (so nobody waits for a
// rank that gave up).
//
// Thread-safety: public methods may be called from any thread; Execute runs
// on one thread at a time (the engine's token).
#ifndef CHOIR_COMM_COMM_IMPL_H_
#define CHOIR_COMM_COMM_IMPL_H_

#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/layout.h"
#include "algorithms/op.h"
#include "algorithms/select.h"
#include "algorithms/walk_choice.h"
#include "base/fork.h"
#include "choir/communicator.h"
#include "choir/topology.h"
#include "comm/engine.h"
#include "comm/join_reports.h"
#include "comm/work_state.h"
#include "diag/metrics.h"
#include "transport/connect.h"
#include "transport/endpoint.h"

namespace choir::comm {

enum class MismatchCheck { kOff, kHeaders, kFull };

// Settings resolved once at creation.
struct CommConfig {
  std::string name;
  std::string uid;  // name + generation: unique per incarnation
  std::string job_id;
  std::string host_id;
  double timeout_seconds = 300;
  transport::TransportChoice transport = transport::TransportChoice::kAuto;
  MismatchCheck mismatch = MismatchCheck::kHeaders;
  double stall_seconds = 2;
  uint64_t async_bytes = 256 << 10;
  uint32_t time_one_in = 8;  // CHOIR_TIME_ONE_IN (diag::CommMetrics::TimeThisCall)
  algorithms::SelectConfig select;
};

// What a sub-communicator takes over from its parent instead of detecting
// or reading the topology file again (the file describes the world's ranks).
struct InheritedPlace {
  RankPlace place;  // this rank's
  algorithms::LinkCost intra_host, inter_host;
  std::string source;       // "detected", "file <path>"
  std::string fingerprint;  // of the topology file; empty when detected
};

class CommImpl {
 public:
  // `inherited` is null for a communicator made from scratch: then each rank
  // reads CHOIR_TOPO_FILE if set (its host, interface/IP and link classes),
  // or detects its place with hwloc; the places are exchanged in the hellos.
  static Result<std::unique_ptr<CommImpl>> Create(std::shared_ptr<Store> store, int rank, int size,
                                                  const CommOptions& options,
                                                  const InheritedPlace* inherited = nullptr);
  ~CommImpl();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommConfig& config() const { return config_; }
  const std::vector<transport::PeerInfo>& peers() const { return peers_; }
  // Hosts, groups, places and link classes of this communicator's ranks.
  const Topology& topology() const { return topology_; }
  Status sticky() const;

  // Validates `args` and runs or queues the operation.
  Work Submit(algorithms::OpArgs&& args, const CallOptions& options);
  void Abort(const std::string& reason);
  Result<std::unique_ptr<CommImpl>> Split(int color, int key, const CommOptions& options);
  // What Create would say about `options` (and the settings) before any
  // rendezvous: OK, or the error.
  static Status CheckOptions(const CommOptions& options);

 private:
  CommImpl(std::shared_ptr<Store> store, std::shared_ptr<Store> scoped, int rank, int size,
           CommConfig config);
  // Create's work; Create tells the other ranks when it fails. `at`: how
  // far it got (its name once the settings resolved, its position once it
  // joined, and what comm/join_reports.h reports).
  static Result<std::unique_ptr<CommImpl>> Join(const std::shared_ptr<Store>& store, int rank, int size,
                                                const CommOptions& options, const InheritedPlace* inherited,
                                                JoinStanding* at);
  class OpObserver;

  Status Validate(const algorithms::OpArgs& args) const;
  // What a call equal to the last one that passed Validate reuses of it
  // (engine thread only). The checks, the signature and the byte count
  // depend only on the arguments and on this rank's place, the default
  // algorithm only on the kind, count and type (Select): a loop of small
  // collectives validates, describes and selects once (docs/
  // performance-log.md, "A call plan for repeated calls").
  struct CallPlan {
    bool set = false;
    algorithms::CollKind kind = algorithms::CollKind::kBarrier;
    const void* send = nullptr;
    void* recv = nullptr;
    size_t count = 0;
    DataType dtype = DataType::kUint8;
    ReduceOp op = ReduceOp::kSum;
    int root = 0, peer = 0, tag = 0;
    algorithms::Signature sig;
    uint64_t selection_bytes = 0;
    const algorithms::Algorithm* algorithm = nullptr;  // the default choice once made
    int algo_index = -1;
    // The context its calls run in, made by the first (RunCollective); each
    // call renews its sequence number and hooks (which point into that
    // call's frame: valid only while it runs).
    std::optional<algorithms::Context> ctx;
  };
  // Validate, skipped for a call equal to the last one that passed. Sets
  // `plan` to the call's plan, or to null for calls never kept: those with
  // per-rank counts (the V variants), whose counts it would have to keep.
  Status ValidateOnce(const algorithms::OpArgs& args, CallPlan** plan);
  // ValidateOnce for a call unlike the last one: Validate, then keep its
  // plan unless it has per-rank counts (`counts`).
  Status ValidateAndPlan(const algorithms::OpArgs& args, bool counts, CallPlan** plan);
  // Runs one operation to completion on the current thread. `unshared`: no
  // other thread can reach `state` yet (an operation run inline, before its
  // Work is returned).
  void Execute(algorithms::OpArgs& args, const CallOptions& options, const std::shared_ptr<Work::State>& state,
               bool unshared);
  // `start`: when Execute began (CoarseNowNanos, never ahead of NowNanos),
  // for the elapsed time in errors. `plan`: this call's, or null. Sets
  // info->route and info->algorithm.
  Status RunCollective(algorithms::OpArgs& args, const CallOptions& options, CallPlan* plan, uint64_t seq,
                       int64_t start, Deadline deadline, CompletionInfo* info, int* algo_index,
                       int64_t* first_data_ns);
  // SelectAlgorithm, remembering the last choice for equal calls.
  Result<const algorithms::Algorithm*> Select(const algorithms::Context& ctx, const algorithms::OpArgs& args,
                                              const CallOptions& options);

  // Point-to-point progress (comm/p2p.cc). A Send or Recv posts its transfer
  // and moves it as far as it goes at once; one that cannot finish yet stays
  // pending, the call returns, and its Work completes later. So a rank can
  // post a receive and then the send its peer waits for (irecv, then send;
  // batch_isend_irecv([irecv, isend])), and two ranks can each isend a large
  // message before they irecv. Pending transfers move (sends in posted order
  // per peer, receives matched per tag in posted order): whenever a
  // point-to-point operation runs; in the engine's background task
  // (P2PProgressTask), run by a thread that waits for one of them (which
  // stops once its own has finished) or, when nobody does, by the progress
  // thread; and, to completion, before any collective (which never shares a
  // channel with a half-moved message).
  struct PendingP2P {
    algorithms::OpArgs args;
    std::shared_ptr<Work::State> state;
    Deadline deadline = Deadline::Infinite();
    int64_t t0 = 0;         // OpNanos() when it began
    int64_t posted_ns = 0;  // CoarseNowNanos() when it began (timeout messages)
  };
  enum class Drive {
    kUntilStuck,  // until nothing moved for the spinning part of the wait policy
    kBackground,  // until all finish, or the queue, a helper's wait or closing wants the engine
    kAll,         // until all finish (before a collective)
  };
  void PostPointToPoint(algorithms::OpArgs& args, Deadline deadline, int64_t t0, int64_t posted_ns,
                        const std::shared_ptr<Work::State>& state);
  // Settles the operations whose transfers finished; on an error (or a
  // communicator that already failed) every pending one with it, and
  // returns the first error, a settled one's included. `cap`
  // bounds the wait besides the operations' own deadlines. On the caller's
  // thread of an inline operation (inline_exec_) only `own` completes at
  // once; the others are settled by the background task, so that no Then()
  // callback of another operation runs inside an unrelated Send, Recv or
  // collective call (a torch future callback that issues an operation would
  // wait for itself). A thread waiting in Work::Wait may run them.
  Status DriveP2P(Drive how, const Work::State* own = nullptr, Deadline cap = Deadline::Infinite());
  // Completes `op` (now, or in the background task: see DriveP2P) with `s`,
  // or with E107 for a message of another length, which also fails the
  // communicator; returns what it completed with.
  Status SettleP2P(PendingP2P& op, const transport::Xfer& x, Status s, const Work::State* own);
  void FinishP2P(PendingP2P& op, Status s, int source_rank);
  void FailPendingP2P(const Status& s, const Work::State* own);
  void ScheduleP2PProgress();
  void P2PProgressTask();
  // The state for a collective run inline: the last one's, once every Work
  // for it is gone (a loop of small calls allocates none), else a new one,
  // kept for the next call (engine token held).
  std::shared_ptr<Work::State> TakeInlineState();
  // For Work::State::help: runs queued tasks and the background task
  // (P2PProgressTask) on the waiting thread (Engine::Help).
  std::function<void()> MakeHelp(Work::State* state) const;
  Status CheckSignatures(const algorithms::Signature& mine, uint64_t seq, Deadline deadline);
  Status MismatchError(const algorithms::Signature& mine, uint64_t seq,
                       const transport::MsgHeader& expected, const transport::MsgHeader& got,
                       int peer) const;
  // Called while a collective waits too long: publishes where this rank is and
  // looks for ranks that are at the same step with another signature.
  Status OnStall(const algorithms::Signature& mine, uint64_t seq, double waited);
  // One line per rank: which collective each reported waiting in.
  std::string ProgressReport(uint64_t seq);
  // Records the first error and, if `broadcast`, tells every peer about it.
  void Fail(const Status& status, bool broadcast);
  std::string Describe(const algorithms::Signature& sig, uint64_t seq) const;

  std::shared_ptr<Store> store_;   // as given (Split uses it)
  std::shared_ptr<Store> scoped_;  // prefixed with this communicator's uid
  const int rank_;
  const int size_;
  CommConfig config_;
  std::vector<transport::PeerInfo> peers_;
  algorithms::Layout layout_;  // hosts of this communicator's ranks
  Topology topology_;          // what the layout and link costs were built from
  std::string topo_fingerprint_;
  algorithms::LinkCost intra_host_cost_{1e-6, 10e9};
  algorithms::LinkCost inter_host_cost_{20e-6, 3e9};
  std::unique_ptr<transport::Endpoint> endpoint_;
  std::shared_ptr<diag::CommMetrics> metrics_;
  algorithms::Scratch scratch_;
  algorithms::WalkChooser walk_chooser_;  // same-host walks measured by this communicator
  algorithms::StagingChooser staging_chooser_;  // and the store kind of the pipe's staging
  // The last default selection (Select); used by the thread running ops.
  struct SelectionCache {
    algorithms::CollKind kind = algorithms::CollKind::kBarrier;
    size_t count = 0;
    DataType dtype = DataType::kFloat32;
    const algorithms::Algorithm* algorithm = nullptr;
  } last_selection_;
  CallPlan last_call_;  // the last call that passed Validate (ValidateOnce)
  std::shared_ptr<Work::State> spare_state_;  // TakeInlineState's (engine token held)
  // The process that created this communicator (base/fork.h): a forked
  // child's copy refuses to run operations and leaves everything alone.
  const uint64_t fork_generation_ = WatchForks();
  const int creator_pid_ = static_cast<int>(getpid());
  bool ForkedCopy() const { return ForkGeneration() != fork_generation_; }
  Status ForkedCopyError(const char* what) const;
  uint64_t seq_ = 0;  // collectives executed (engine thread only)
  int splits_ = 0;    // Split calls (for unique child names)

  // Pending point-to-point transfers, in posted order (engine thread only).
  std::vector<transport::Xfer> p2p_xfers_;
  std::vector<PendingP2P> p2p_ops_;  // parallel to p2p_xfers_
  // Finished on an inline call's thread, completed by the background task.
  struct SettledP2P {
    PendingP2P op;
    Status status;
    int source_rank = -1;
  };
  std::vector<SettledP2P> p2p_settled_;
  bool inline_exec_ = false;         // Execute runs inline on the caller's thread (engine thread only)
  bool p2p_task_queued_ = false;     // P2PProgressTask is the engine's background task (engine thread only)
  std::atomic<bool> p2p_pending_{false};  // p2p_ops_ or p2p_settled_ is not empty (Submit reads it)
  std::atomic<bool> closing_{false};      // the destructor runs: pending transfers fail

  std::atomic<bool> failed_{false};
  std::atomic<bool> abort_called_{false};
  mutable std::mutex sticky_mu_;
  Status sticky_;

  // Declared last: destroyed first, so queued operations finish while the
  // endpoint still exists.
  // Shared so that a Work's helper (Work::State::help) can hold it weakly.
  std::shared_ptr<Engine> engine_ = std::make_shared<Engine>();
};

// Mismatch reports and stall checks for one collective.
class CommImpl::OpObserver final : public transport::RunObserver {
 public:
  OpObserver(CommImpl* comm, const algorithms::Signature& sig, uint64_t seq) : comm_(comm), sig_(sig), seq_(seq) {}
  Status Mismatch(const transport::MsgHeader& expected, const transport::MsgHeader& got, int peer) override {
    return comm_->MismatchError(sig_, seq_, expected, got, peer);
  }
  Status Stall(double waited) override { return comm_->OnStall(sig_, seq_, waited); }

 private:
  CommImpl* comm_;
  const algorithms::Signature& sig_;
  uint64_t seq_;
};

}  // namespace choir::comm

#endif  // CHOIR_COMM_COMM_IMPL_H_
