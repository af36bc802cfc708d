#include "comm/comm_impl.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/fork.h"
#include "base/logging.h"
#include "comm/work_state.h"

namespace choir::comm {

using algorithms::CollKind;
using algorithms::OpArgs;
using algorithms::Signature;

namespace {

// A forked child waits for an operation its parent queued: nothing in the
// child runs the queue, and it must not (the transport is the parent's).
void FailInForkedChild(Work::State* state, int creator) {
  if (state->is_done() || state->failing_in_child.exchange(1) != 0) return;
  state->Complete(Status(Code::kNotSupported,
                         fmt::format("an operation queued in process {} cannot finish in process {}, a child "
                                     "forked from it; wait for it before forking",
                                     creator, getpid())),
                  CompletionInfo{});
}

}  // namespace

CommImpl::CommImpl(std::shared_ptr<Store> store, std::shared_ptr<Store> scoped, int rank, int size,
                   CommConfig config)
    : store_(std::move(store)), scoped_(std::move(scoped)), rank_(rank), size_(size), config_(std::move(config)) {}

CommImpl::~CommImpl() {
  if (ForkedCopy()) {
    // The threads that ran the queue are the parent's, the sockets, segments
    // and registry file the parent still uses: leave them all to it.
    new std::shared_ptr<Engine>(std::move(engine_));
    (void)endpoint_.release();
    new std::shared_ptr<diag::CommMetrics>(std::move(metrics_));
    return;
  }
  // Pending point-to-point transfers fail (their peer is not coming); the
  // task that drives them returns and stops queueing itself.
  closing_.store(true, std::memory_order_seq_cst);
  if (p2p_pending_.load(std::memory_order_seq_cst)) endpoint_->Wake();
  engine_->Drain();
}

Status CommImpl::ForkedCopyError(const char* what) const {
  return Status(Code::kNotSupported,
                fmt::format("rank {}: {} in process {}, a child forked from process {} that created "
                            "communicator '{}': its threads and connections stay with that process. "
                            "Create a communicator in the child, or fork before creating one",
                            rank_, what, getpid(), creator_pid_, config_.name));
}

Status CommImpl::sticky() const {
  if (!failed_.load(std::memory_order_acquire)) return Status::Ok();
  std::lock_guard<std::mutex> lock(sticky_mu_);
  return sticky_;
}

std::string CommImpl::Describe(const Signature& sig, uint64_t seq) const {
  return fmt::format("rank {}: {} #{} {}", rank_, algorithms::CollKindName(sig.kind), seq, sig.ToString());
}

void CommImpl::Fail(const Status& status, bool broadcast) {
  {
    std::lock_guard<std::mutex> lock(sticky_mu_);
    if (failed_.load()) return;
    sticky_ = status;
    failed_.store(true, std::memory_order_release);
  }
  CHOIR_LOG(Info, COLL, "communicator '{}' failed: {}", config_.uid, status.ToString());
  // Tell every peer, so that nobody keeps waiting for this rank.
  if (broadcast) endpoint_->BroadcastAbort(status);
}

Work CommImpl::Submit(OpArgs&& args, const CallOptions& options) {
  if (ForkedCopy()) [[unlikely]] {
    auto state = NewWorkState();
    state->owner = engine_.get();
    state->Complete(ForkedCopyError(algorithms::CollKindName(args.kind)), CompletionInfo{});
    return Work(std::move(state));
  }
  const bool p2p = args.kind == CollKind::kSend || args.kind == CollKind::kRecv;
  const bool small = args.SelectionBytes(size_) <= config_.async_bytes;
  std::shared_ptr<Work::State> state;
  if ((small || p2p) && engine_->TryRunInline([&] {
        // A send or receive may stay pending: it takes a state of its own.
        state = p2p ? NewWorkState() : TakeInlineState();
        state->owner = engine_.get();
        inline_exec_ = true;
        Execute(args, options, state, /*unshared=*/true);
        inline_exec_ = false;
      })) {
    // A send or receive that could not finish at once is pending: whoever
    // waits for it drives it (comm/p2p.cc).
    if (p2p && !state->is_done()) state->help = MakeHelp(state.get());
    // Moved into the Work: a copy would cost two more locked reference
    // count updates on the small-message path.
    return Work(std::move(state));
  }
  state = NewWorkState();
  state->owner = engine_.get();
  // A thread that waits for this operation before the progress thread took
  // it runs it (and anything queued before it) itself.
  state->help = MakeHelp(state.get());
  state->start = [engine = std::weak_ptr<Engine>(engine_), raw = state.get(), generation = fork_generation_,
                  creator = creator_pid_] {
    if (ForkGeneration() != generation) [[unlikely]] {
      FailInForkedChild(raw, creator);  // queued in the parent, whose progress thread is not here
      return;
    }
    if (auto e = engine.lock()) e->StartQueued();
  };
  engine_->Submit(
      [this, args = std::move(args), options, state]() mutable { Execute(args, options, state, /*unshared=*/false); },
      false);
  // A task driving pending point-to-point transfers may sleep in the
  // transport: it returns for what was just queued.
  if (p2p_pending_.load(std::memory_order_seq_cst)) endpoint_->Wake();
  return Work(std::move(state));
}

std::shared_ptr<Work::State> CommImpl::TakeInlineState() {
  if (spare_state_ != nullptr && spare_state_.use_count() == 1) {
    // Every other holder let go with a releasing decrement of the count this
    // load read: the fence orders their accesses to the state before ours.
    std::atomic_thread_fence(std::memory_order_acquire);
    spare_state_->Reset();
  } else {
    spare_state_ = NewWorkState();
  }
  return spare_state_;
}

std::function<void()> CommImpl::MakeHelp(Work::State* state) const {
  return [engine = std::weak_ptr<Engine>(engine_), raw = state, generation = fork_generation_,
          creator = creator_pid_] {
    if (ForkGeneration() != generation) [[unlikely]] {
      FailInForkedChild(raw, creator);
      return;
    }
    if (auto e = engine.lock()) e->Help([raw] { return raw->is_done(); });
  };
}

void CommImpl::Execute(OpArgs& args, const CallOptions& options, const std::shared_ptr<Work::State>& state,
                       bool unshared) {
  if (ForkedCopy()) [[unlikely]] {  // queued before a fork, run in the child
    state->Complete(ForkedCopyError(algorithms::CollKindName(args.kind)), CompletionInfo{});
    return;
  }
  CompletionInfo info;
  // Two clocks: a coarse one to place the deadline (one tick later than the
  // coarse reading, so never early, at most a tick late), and the operation
  // clock for the duration the metrics and WorkInfo report. Both are cheaper
  // than NowNanos(), which would cost an 8-byte collective 50-75 ns of its
  // ~200 (docs/performance-log.md, "Per-call work"); the operation clock is
  // read only for the calls that are timed (CommMetrics::TimeThisCall).
  const int64_t start = CoarseNowNanos();
  int64_t t0 = 0;
  int64_t first_data_ns = 0;  // OpNanos() when data first had to be waited for
  int algo_index = -1;
  CallPlan* plan = nullptr;
  Status s;
  if (failed_.load(std::memory_order_acquire)) [[unlikely]] {
    const Status first = sticky();
    s = Status(first.code(), "this communicator already failed: " + first.message());
  } else if (Status invalid = ValidateOnce(args, &plan); !invalid.ok()) {
    s = invalid.WithContext("rank " + std::to_string(rank_) + ": " + algorithms::CollKindName(args.kind));
    Fail(s, /*local=*/true);
  } else {
    const bool p2p = args.kind == CollKind::kSend || args.kind == CollKind::kRecv;
    // Asked of every other collective, inline or not, so that every rank
    // counts the same calls. An alltoallv's size class depends on this
    // rank's own counts: it is always timed.
    const bool always = p2p || args.kind == CollKind::kAlltoallV;
    const bool sampled =
        !always && metrics_->TimeThisCall(args.kind, plan != nullptr ? plan->selection_bytes : args.SelectionBytes(size_));
    info.timed = always || !unshared || sampled;
    if (info.timed) t0 = OpNanos();
    const double timeout = options.timeout.count() > 0 ? static_cast<double>(options.timeout.count()) / 1000
                                                       : config_.timeout_seconds;
    const Deadline deadline = Deadline::AfterSecondsFrom(start + CoarseTickNanos(), timeout);
    if (p2p) {
      PostPointToPoint(args, deadline, t0, start, state);  // completes `state`, now or later
      return;
    }
    // A collective never starts with a point-to-point message half-moved on
    // a channel it uses.
    if (!p2p_ops_.empty()) {
      if (Status p = DriveP2P(Drive::kAll, nullptr, deadline); !p.ok()) {
        s = Status(p.code(), fmt::format("rank {}: {}: a send or receive this rank posted before it did not finish: {}",
                                         rank_, algorithms::CollKindName(args.kind), p.message()));
      }
    }
    if (s.ok()) {
      info.sequence = ++seq_;
      s = RunCollective(args, options, plan, info.sequence, start, deadline, &info, &algo_index,
                        info.timed ? &first_data_ns : nullptr);
    }
    // Relay even a peer's failure: the rank that failed first may not have
    // reached everyone (it may have died). Our own Abort() already told them.
    if (!s.ok()) Fail(s, !abort_called_.load());
  }
  const uint64_t bytes = plan != nullptr ? plan->selection_bytes : args.SelectionBytes(size_);
  if (info.timed) {
    const int64_t elapsed = ElapsedNanos(t0, start);
    info.seconds = static_cast<double>(elapsed) * 1e-9;
    // How long the data kept it waiting: never longer than the whole call.
    const int64_t waited = first_data_ns > t0 ? std::min(first_data_ns - t0, elapsed) : 0;
    metrics_->RecordOp(args.kind, bytes, info.seconds, s.ok(), algo_index, static_cast<double>(waited) * 1e-9);
  } else {
    metrics_->RecordUntimedOp(args.kind, bytes, s.ok(), algo_index);
  }
  if (!s.ok()) metrics_->RecordError(s.number());
  if (unshared) {
    state->CompleteUnshared(std::move(s), info);
  } else {
    state->Complete(std::move(s), info);
  }
}

Status CommImpl::ValidateOnce(const OpArgs& a, CallPlan** plan) {
  CallPlan& v = last_call_;
  // Per-rank counts (the V variants) are never kept, so a call that has
  // them is always checked.
  const bool counts = !a.send_counts.empty() || !a.recv_counts.empty();
  if (v.set && !counts && v.kind == a.kind && v.send == a.send && v.recv == a.recv && v.count == a.count &&
      v.dtype == a.dtype && v.op == a.op && v.root == a.root && v.peer == a.peer && v.tag == a.tag) [[likely]] {
    *plan = &v;
    return Status::Ok();
  }
  return ValidateAndPlan(a, counts, plan);
}

Status CommImpl::ValidateAndPlan(const OpArgs& a, bool counts, CallPlan** plan) {
  CallPlan& v = last_call_;
  *plan = nullptr;
  Status s = Validate(a);
  const bool vkind = a.kind == CollKind::kAllgatherV || a.kind == CollKind::kAlltoallV;
  if (!s.ok() || vkind || counts) return s;
  v = {true, a.kind, a.send, a.recv, a.count, a.dtype, a.op, a.root, a.peer, a.tag, Signature::Of(a),
       a.SelectionBytes(size_), nullptr, -1, std::nullopt};
  *plan = &v;
  return s;
}

Status CommImpl::RunCollective(OpArgs& args, const CallOptions& options, CallPlan* plan, uint64_t seq,
                               int64_t start, Deadline deadline, CompletionInfo* info, int* algo_index,
                               int64_t* first_data_ns) {
  Signature own_sig;
  if (plan == nullptr) own_sig = Signature::Of(args);
  const Signature& sig = plan != nullptr ? plan->sig : own_sig;
  OpObserver observer(this, sig, seq);
  transport::RunHooks hooks;
  hooks.deadline = deadline;
  hooks.observer = &observer;
  hooks.stall_seconds = config_.stall_seconds;
  hooks.first_data_ns = first_data_ns;
  hooks.route = &info->route;
  Status s;
  if (config_.mismatch == MismatchCheck::kFull && size_ > 1) s = CheckSignatures(sig, seq, deadline);
  if (s.ok()) {
    // A call equal to the last one takes the algorithm chosen for it, unless
    // it names one of its own.
    const bool planned = plan != nullptr && options.algorithm.empty();
    bool unselectable = false;
    auto run = [&](algorithms::Context& ctx) -> Status {
      const algorithms::Algorithm* algo = planned ? plan->algorithm : nullptr;
      if (algo != nullptr) {
        *algo_index = plan->algo_index;
      } else {
        auto chosen = Select(ctx, args, options);
        if (!chosen.ok()) {
          unselectable = true;
          return chosen.status();
        }
        algo = *chosen;
        *algo_index = static_cast<int>(algo - algorithms::AllAlgorithms().data());
        if (planned) {
          plan->algorithm = algo;
          plan->algo_index = *algo_index;
        }
      }
      info->algorithm = algo->name;
      return algo->fn(ctx, args);
    };
    // A planned call runs in the context made for the plan's first call.
    if (plan != nullptr && plan->ctx) {
      plan->ctx->Renew(seq, hooks);
      s = run(*plan->ctx);
    } else {
      algorithms::Context ctx(*endpoint_, hooks, seq, sig, args, scratch_);
      ctx.set_layout(&layout_);
      ctx.set_select_config(&config_.select);
      ctx.set_walk_chooser(&walk_chooser_);
      ctx.set_staging_chooser(&staging_chooser_);
      ctx.set_link_costs(intra_host_cost_, inter_host_cost_);
      if (plan != nullptr) plan->ctx = ctx;
      s = run(ctx);
    }
    if (unselectable) return s.WithContext(Describe(sig, seq));
  }
  if (s.ok()) return s;
  s = endpoint_->Explain(s);  // a lost peer is often explained by another rank's abort report
  const double elapsed = static_cast<double>(NowNanos() - start) * 1e-9;
  std::string context = Describe(sig, seq);
  if (info->algorithm != nullptr) context += std::string(" [") + info->algorithm + "]";
  if (s.code() == Code::kCollectiveTimeout && !transport::IsRemoteFailure(s)) {
    return Status(s.code(), context + fmt::format(" did not complete within {:.1f} s: ", elapsed) +
                                s.message() + ". " + ProgressReport(seq));
  }
  return s.WithContext(context + fmt::format(" after {:.3f} s", elapsed));
}

Result<const algorithms::Algorithm*> CommImpl::Select(const algorithms::Context& ctx, const OpArgs& args,
                                                     const CallOptions& options) {
  // The choice depends only on the collective, its element count and type
  // (and the counts of the V variants, never cached), so a loop of equal
  // calls selects once.
  const bool cacheable = options.algorithm.empty() && args.kind != CollKind::kAllgatherV &&
                         args.kind != CollKind::kAlltoallV;
  SelectionCache& c = last_selection_;
  if (cacheable && c.algorithm != nullptr && c.kind == args.kind && c.count == args.count && c.dtype == args.dtype) {
    return c.algorithm;
  }
  auto algo = algorithms::SelectAlgorithm(ctx.View(), args, config_.select, options.algorithm);
  if (algo.ok() && cacheable) c = {args.kind, args.count, args.dtype, *algo};
  return algo;
}

void CommImpl::Abort(const std::string& reason) {
  if (ForkedCopy()) return;  // the parent's peers must not hear of a copy
  abort_called_.store(true);
  const Status s(Code::kAborted, fmt::format("rank {} aborted the communicator{}{}", rank_,
                                             reason.empty() ? "" : ": ", reason));
  {
    std::lock_guard<std::mutex> lock(sticky_mu_);
    if (!failed_.load()) {
      sticky_ = s;
      failed_.store(true, std::memory_order_release);
    }
  }
  // Stop a running operation; whoever holds the engine tells the peers.
  endpoint_->RequestAbort(s);
  if (!engine_->TryRunExclusive([&] { endpoint_->BroadcastAbort(s); })) {
    engine_->Submit([this, s] { endpoint_->BroadcastAbort(s); }, false);
    engine_->StartQueued();  // nobody waits for it: no pickup delay
  }
}

}  // namespace choir::comm
