// Point-to-point progress: Send and Recv that do not hold the communicator
// until they finish (the rules are in comm_impl.h, above PendingP2P).
//
// Everything here runs on the thread that holds the engine, so the pending
// lists need no lock; Submit only reads p2p_pending_ to know whether a
// driving task may be asleep in the transport and must be woken.
#include <fmt/format.h>

#include "base/clock.h"
#include "comm/comm_impl.h"
#include "comm/work_state.h"

namespace choir::comm {

using algorithms::CollKind;
using algorithms::OpArgs;

namespace {

std::string DescribeP2P(int rank, const OpArgs& args) {
  if (args.kind == CollKind::kRecv && args.peer == Communicator::kAnySource) {
    return fmt::format("rank {}: recv from any rank (tag {})", rank, args.tag);
  }
  return fmt::format("rank {}: {} {} rank {} (tag {})", rank, algorithms::CollKindName(args.kind),
                     args.kind == CollKind::kSend ? "to" : "from", args.peer, args.tag);
}

Status Closing() {
  return Status(Code::kAborted,
                "the communicator was destroyed while this operation was pending; wait for every send and "
                "receive before destroying it");
}

}  // namespace

void CommImpl::PostPointToPoint(OpArgs& args, Deadline deadline, int64_t t0, int64_t posted_ns,
                                const std::shared_ptr<Work::State>& state) {
  transport::MsgHeader h;
  h.kind = static_cast<uint32_t>(transport::MsgKind::kP2P);
  h.seq = static_cast<uint64_t>(static_cast<uint32_t>(args.tag));
  h.sig = static_cast<uint64_t>(args.dtype);  // a Recv of another type is a mismatch, as in collectives
  h.length = args.count * args.elem_size();
  p2p_xfers_.push_back(args.kind == CollKind::kSend ? transport::Xfer::Send(args.peer, h, args.send)
                                                    : transport::Xfer::Recv(args.peer, h, args.recv));
  p2p_ops_.push_back(PendingP2P{args, state, deadline, t0, posted_ns});
  p2p_pending_.store(true, std::memory_order_seq_cst);
  (void)DriveP2P(Drive::kUntilStuck, state.get());  // an error has settled every pending Work
}

Status CommImpl::DriveP2P(Drive how, const Work::State* own, Deadline cap) {
  // The background drive gives the engine back for queued work and for the
  // destructor; on the progress thread also for threads that wait in
  // Engine::Help (they drive their own operations, without a hand-off), on
  // such a thread once its own operation has finished.
  const std::function<bool()> give_back = [this] {
    if (engine_->has_queued() || closing_.load(std::memory_order_seq_cst)) return true;
    return Engine::OnHelperThread() ? Engine::HelperDone() : engine_->helpers_waiting();
  };
  Status result;  // the first error
  while (!p2p_ops_.empty()) {
    // A communicator being destroyed, or one that failed (a local error, a
    // collective's timeout, a receive settled below) moves nothing more: its
    // pending operations fail with that error.
    const bool closing = closing_.load(std::memory_order_seq_cst);
    Status stop = closing ? Closing() : sticky();
    if (!stop.ok()) {
      if (!closing) stop = Status(stop.code(), "this communicator already failed: " + stop.message());
      FailPendingP2P(stop, own);
      if (result.ok()) result = stop;
      break;
    }
    transport::RunHooks hooks;
    Deadline deadline = cap;
    int64_t since = 0;
    for (const PendingP2P& op : p2p_ops_) {
      deadline = Deadline::Earlier(deadline, op.deadline);
      since = since == 0 ? op.posted_ns : std::min(since, op.posted_ns);
    }
    hooks.deadline = deadline;
    hooks.waiting_since_ns = since;
    hooks.return_on_completion = true;
    hooks.return_when_idle = how == Drive::kUntilStuck;
    if (how == Drive::kBackground) hooks.return_when = &give_back;
    if (Status s = endpoint_->Run(p2p_xfers_, hooks); !s.ok()) {
      result = endpoint_->Explain(s);
      FailPendingP2P(result, own);
      break;
    }
    // Settle what finished; keep the rest in posted order.
    bool finished = false;
    size_t kept = 0;
    for (size_t i = 0; i < p2p_ops_.size(); ++i) {
      if (p2p_xfers_[i].complete) {
        const Status settled = SettleP2P(p2p_ops_[i], p2p_xfers_[i], Status::Ok(), own);
        if (!settled.ok() && result.ok()) result = settled;
        finished = true;
        continue;
      }
      if (kept != i) {
        p2p_xfers_[kept] = p2p_xfers_[i];
        p2p_ops_[kept] = std::move(p2p_ops_[i]);
      }
      ++kept;
    }
    p2p_xfers_.resize(kept);
    p2p_ops_.resize(kept);
    if (how == Drive::kAll) continue;
    if (!finished || (how == Drive::kBackground && give_back())) break;
  }
  if (p2p_ops_.empty() && p2p_settled_.empty()) {
    p2p_pending_.store(false, std::memory_order_seq_cst);
  } else {
    ScheduleP2PProgress();
  }
  return result;
}

Status CommImpl::SettleP2P(PendingP2P& op, const transport::Xfer& x, Status s, const Work::State* own) {
  int source = -1;
  if (s.ok() && op.args.kind == CollKind::kRecv) {
    source = x.matched_peer;
    if (x.matched_length != x.header.length) {
      s = Status(Code::kBufferTooSmall, fmt::format("rank {} sent {} bytes with tag {} but this Recv expects {} bytes",
                                                    x.matched_peer, x.matched_length, op.args.tag, x.header.length));
      s = s.WithContext(DescribeP2P(rank_, op.args));
      Fail(s, !abort_called_.load());  // the next drive fails the other pending operations
    }
  }
  const Status result = s;
  if (inline_exec_ && op.state.get() != own) {
    p2p_settled_.push_back(SettledP2P{std::move(op), std::move(s), source});
  } else {
    FinishP2P(op, std::move(s), source);
  }
  return result;
}

void CommImpl::FinishP2P(PendingP2P& op, Status s, int source_rank) {
  CompletionInfo info;
  info.source_rank = source_rank;
  info.seconds = static_cast<double>(ElapsedNanos(op.t0, op.posted_ns)) * 1e-9;
  info.timed = true;
  metrics_->RecordOp(op.args.kind, op.args.SelectionBytes(size_), info.seconds, s.ok(), -1, 0);
  if (!s.ok()) metrics_->RecordError(s.number());
  op.state->Complete(std::move(s), info);
  engine_->NotifyHelpers();  // a thread waiting for it in Help() while this drive goes on
}

void CommImpl::FailPendingP2P(const Status& s, const Work::State* own) {
  const bool closing = closing_.load(std::memory_order_seq_cst);
  // Tell the peers, unless the communicator is only being destroyed (its
  // peers need not fail for an operation this rank left unfinished) or had
  // failed already. Our own Abort() already told them.
  if (!closing && !failed_.load(std::memory_order_acquire)) {
    Fail(s.WithContext(DescribeP2P(rank_, p2p_ops_.front().args)), !abort_called_.load());
  }
  for (size_t i = 0; i < p2p_ops_.size(); ++i) {
    // A transfer that finished in the pass that failed keeps its result.
    if (p2p_xfers_[i].complete) {
      (void)SettleP2P(p2p_ops_[i], p2p_xfers_[i], Status::Ok(), own);
    } else {
      (void)SettleP2P(p2p_ops_[i], p2p_xfers_[i], s.WithContext(DescribeP2P(rank_, p2p_ops_[i].args)), own);
    }
  }
  p2p_xfers_.clear();
  p2p_ops_.clear();
}

void CommImpl::ScheduleP2PProgress() {
  if (p2p_task_queued_) return;
  p2p_task_queued_ = true;
  engine_->SubmitBackground([this] { P2PProgressTask(); });
}

void CommImpl::P2PProgressTask() {
  p2p_task_queued_ = false;
  // Operations that finished on an inline call's thread complete here, where
  // their callbacks may issue new operations.
  std::vector<SettledP2P> settled;
  settled.swap(p2p_settled_);
  for (SettledP2P& done : settled) FinishP2P(done.op, std::move(done.status), done.source_rank);
  (void)DriveP2P(Drive::kBackground);  // queues this task again while something is pending
}

}  // namespace choir::comm
