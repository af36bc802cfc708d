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
  return fmt::format("rank {}: {} {} rank {} (tag {})", rank, algorithms::CollKindName(args.kind),
                     args.kind == CollKind::kSend ? "to" : "from",
                     args.peer == Communicator::kAnySource ? std::string("any") : std::to_string(args.peer), args.tag);
}

}  // namespace

void CommImpl::PostPointToPoint(OpArgs& args, Deadline deadline, int64_t t0,
                                const std::shared_ptr<Work::State>& state) {
  transport::MsgHeader h;
  h.kind = static_cast<uint32_t>(transport::MsgKind::kP2P);
  h.seq = static_cast<uint64_t>(static_cast<uint32_t>(args.tag));
  h.sig = static_cast<uint64_t>(args.dtype);  // a Recv of another type is a mismatch, as in collectives
  h.length = args.count * args.elem_size();
  p2p_xfers_.push_back(args.kind == CollKind::kSend ? transport::Xfer::Send(args.peer, h, args.send)
                                                    : transport::Xfer::Recv(args.peer, h, args.recv));
  p2p_ops_.push_back(PendingP2P{args, state, deadline, t0});
  p2p_pending_.store(true, std::memory_order_seq_cst);
  (void)DriveP2P(Drive::kUntilStuck);  // an error has completed every pending Work
  if (!p2p_ops_.empty()) ScheduleP2PProgress();
}

Status CommImpl::DriveP2P(Drive how) {
  // The background drive gives the engine back for queued work, for a
  // helper whose operation finished, and for the destructor.
  const std::function<bool()> give_back = [this] {
    return engine_->has_queued() || Engine::HelperDone() || closing_.load(std::memory_order_relaxed);
  };
  while (!p2p_ops_.empty()) {
    transport::RunHooks hooks;
    Deadline deadline = Deadline::Infinite();
    for (const PendingP2P& op : p2p_ops_) deadline = Deadline::Earlier(deadline, op.deadline);
    hooks.deadline = deadline;
    hooks.return_on_completion = true;
    hooks.return_when_idle = how == Drive::kUntilStuck;
    if (how == Drive::kBackground) hooks.return_when = &give_back;
    if (Status s = endpoint_->Run(p2p_xfers_, hooks); !s.ok()) {
      FailPendingP2P(s);
      return s;
    }
    // Complete what finished; keep the rest in posted order.
    bool finished = false;
    size_t kept = 0;
    for (size_t i = 0; i < p2p_ops_.size(); ++i) {
      if (p2p_xfers_[i].complete) {
        FinishP2P(p2p_ops_[i], p2p_xfers_[i], Status::Ok());
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
  if (p2p_ops_.empty()) p2p_pending_.store(false, std::memory_order_seq_cst);
  return Status::Ok();
}

void CommImpl::FinishP2P(PendingP2P& op, const transport::Xfer& x, Status s) {
  CompletionInfo info;
  const uint64_t expected = x.header.length;
  if (s.ok() && op.args.kind == CollKind::kRecv) {
    info.source_rank = x.matched_peer;
    if (x.matched_length != expected) {
      s = Status(Code::kBufferTooSmall, fmt::format("rank {} sent {} bytes with tag {} but this Recv expects {} bytes",
                                                    x.matched_peer, x.matched_length, op.args.tag, expected));
      s = s.WithContext(DescribeP2P(rank_, op.args));
      Fail(s, !abort_called_.load());
    }
  }
  info.seconds = static_cast<double>(std::max<int64_t>(0, OpNanos() - op.t0)) * 1e-9;
  metrics_->RecordOp(op.args.kind, op.args.SelectionBytes(size_), info.seconds, s.ok(), -1, 0);
  if (!s.ok()) metrics_->RecordError(s.number());
  op.state->Complete(std::move(s), info);
}

void CommImpl::FailPendingP2P(const Status& s) {
  const Status failure = endpoint_->Explain(s);
  // Relay even a peer's failure: the rank that failed first may not have
  // reached everyone. Our own Abort() already told them.
  Fail(failure.WithContext(DescribeP2P(rank_, p2p_ops_.front().args)), !abort_called_.load());
  for (size_t i = 0; i < p2p_ops_.size(); ++i) {
    FinishP2P(p2p_ops_[i], p2p_xfers_[i], failure.WithContext(DescribeP2P(rank_, p2p_ops_[i].args)));
  }
  p2p_xfers_.clear();
  p2p_ops_.clear();
  p2p_pending_.store(false, std::memory_order_seq_cst);
}

void CommImpl::ScheduleP2PProgress() {
  if (p2p_task_queued_) return;
  p2p_task_queued_ = true;
  engine_->Submit([this] { P2PProgressTask(); }, /*may_run_inline=*/false);
}

void CommImpl::P2PProgressTask() {
  p2p_task_queued_ = false;
  if (p2p_ops_.empty()) return;
  if (closing_.load(std::memory_order_seq_cst)) {
    FailPendingP2P(Status(Code::kAborted,
                          "the communicator was destroyed while this operation was pending; wait for every "
                          "send and receive before destroying it"));
    return;
  }
  (void)DriveP2P(Drive::kBackground);
  // Behind whatever was queued meanwhile, which runs first.
  if (!p2p_ops_.empty()) ScheduleP2PProgress();
}

}  // namespace choir::comm
