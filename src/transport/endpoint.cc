#include "transport/endpoint.h"

#include <emmintrin.h>
#include <sched.h>
#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "base/logging.h"
#include "base/strings.h"
#include "choir/types.h"
#include "diag/metrics.h"

namespace choir::transport {
namespace {
// Longest single sleep, so dead peers, abort requests and the deadline are noticed.
constexpr int64_t kMaxSleepNs = 50'000'000;
std::mutex g_abort_mu;  // guards Endpoint::abort_status_ writes (rare)
}  // namespace

Endpoint::Endpoint(int rank, int size, std::vector<std::unique_ptr<Channel>> channels,
                   std::unique_ptr<Segment> own_segment,
                   std::vector<std::unique_ptr<Segment>> peer_segments, WaitPolicy policy)
    : rank_(rank),
      size_(size),
      channels_(std::move(channels)),
      own_segment_(std::move(own_segment)),
      peer_segments_(std::move(peer_segments)),
      policy_(policy),
      stash_(static_cast<size_t>(size)),
      stash_progress_(static_cast<size_t>(size)) {
  epoll_fd_.Reset(epoll_create1(EPOLL_CLOEXEC));
  for (const auto& ch : channels_) {
    if (ch == nullptr) continue;
    for (int fd : ch->poll_fds()) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.u32 = static_cast<uint32_t>(ch->peer());
      epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev);
    }
  }
  // Level-triggered: a Wake() that comes before the sleep still ends it.
  wake_fd_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (wake_fd_.get() >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = UINT32_MAX;
    epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev);
  }
}

void Endpoint::Wake() {
  if (own_segment_) ForceWakeSegment(own_segment_->header());
  if (wake_fd_.get() >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_.get(), &one, sizeof(one));
  }
}

Endpoint::~Endpoint() {
  for (auto& ch : channels_) {
    if (ch != nullptr) ch->SendBye();
  }
}

TransportKind Endpoint::kind(int peer) const {
  const Channel* ch = channels_[static_cast<size_t>(peer)].get();
  return ch == nullptr ? TransportKind::kShm : ch->kind();
}

void Endpoint::CountSharedRead(int peer, uint64_t bytes) {
  if (metrics_ != nullptr && bytes > 0) metrics_->AddPeerBytes(peer, 0, 0, bytes);
}

void Endpoint::UnlinkSegment() {
  if (own_segment_) own_segment_->Unlink();
}

void Endpoint::RequestAbort(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(g_abort_mu);
    if (abort_requested_.load()) return;
    abort_status_ = status;
  }
  abort_requested_.store(true, std::memory_order_release);
  if (own_segment_) ForceWakeSegment(own_segment_->header());
}

void Endpoint::BroadcastAbort(const Status& status) {
  const std::string text = status.message();
  for (auto& ch : channels_) {
    if (ch) ch->SendAbort(static_cast<int>(status.code()), text);
  }
}

Status Endpoint::ReadAbortMessage(Channel& ch) {
  const MsgHeader h = ch.incoming();
  std::string text(std::min<uint64_t>(h.length, 4096), '\0');
  if (h.length > 4096) {
    return Status(Code::kProtocolError, "oversized abort message from " + ch.Describe());
  }
  Xfer x = Xfer::Recv(ch.peer(), h, text.data());
  // The abort text is tiny and already sent in one piece: a few polls suffice.
  for (int i = 0; i < 1000 && !x.complete; ++i) {
    auto r = ch.ReadPayload(x);
    if (!r.ok()) break;
  }
  return RemoteFailure(ch, static_cast<int>(h.sig), text);
}

Status Endpoint::P2PTypeMismatch(uint64_t sent, const Xfer& x, const std::string& from) const {
  return Status(Code::kCollectiveMismatch,
                fmt::format("{} sent {} elements with tag {} but this Recv expects {}: give Send and Recv the same "
                            "data type",
                            from, DataTypeName(static_cast<DataType>(sent)), x.header.seq,
                            DataTypeName(static_cast<DataType>(x.header.sig))));
}

Result<bool> Endpoint::TakeFromStash(Xfer& x, int peer) {
  auto& q = stash_[static_cast<size_t>(peer)];
  for (auto it = q.begin(); it != q.end(); ++it) {
    if (it->tag != x.header.seq) continue;
    if (it->sig != x.header.sig) return P2PTypeMismatch(it->sig, x, "rank " + std::to_string(peer));
    if (it->data.size() > x.header.length) return false;  // StepRecv reports the size error
    std::copy(it->data.begin(), it->data.end(), x.recv_data);
    x.matched_length = it->data.size();
    x.matched_peer = peer;
    x.done = it->data.size();
    x.complete = true;
    q.erase(it);
    return true;
  }
  return false;
}

Result<bool> Endpoint::ContinueStash(Channel& ch) {
  StashInProgress& s = stash_progress_[static_cast<size_t>(ch.peer())];
  if (!s.active) {
    const MsgHeader& h = ch.incoming();
    if (h.length > (1ull << 34)) {
      return Status(Code::kProtocolError, "point-to-point message of " + std::to_string(h.length) +
                                              " bytes from " + ch.Describe() + " is implausible");
    }
    s.active = true;
    s.data.assign(h.length, 0);
    s.xfer = Xfer::Recv(ch.peer(), h, s.data.data());
  }
  CHOIR_ASSIGN_OR_RETURN(bool progressed, ch.ReadPayload(s.xfer));
  if (s.xfer.complete) {
    stash_[static_cast<size_t>(ch.peer())].push_back(
        Stashed{s.xfer.header.seq, s.xfer.header.sig, std::move(s.data)});
    s = StashInProgress{};
    return true;
  }
  return progressed;
}

Result<bool> Endpoint::StepRecv(Xfer& x, Channel& ch, const RunHooks& hooks) {
  const bool want_p2p = x.header.kind == static_cast<uint32_t>(MsgKind::kP2P);
  if (want_p2p && !x.header_done) {
    CHOIR_ASSIGN_OR_RETURN(const bool taken, TakeFromStash(x, ch.peer()));
    if (taken) return true;
  }
  if (stash_progress_[static_cast<size_t>(ch.peer())].active) return ContinueStash(ch);
  if (!x.header_done) {
    CHOIR_ASSIGN_OR_RETURN(bool have, ch.PollHeader());
    if (!have) return false;
    const MsgHeader& h = ch.incoming();
    if (h.kind == static_cast<uint32_t>(MsgKind::kAbort)) return ReadAbortMessage(ch);
    if (h.kind == static_cast<uint32_t>(MsgKind::kBye)) return Departed(ch, x);
    const bool got_p2p = h.kind == static_cast<uint32_t>(MsgKind::kP2P);
    if (want_p2p) {
      if (!got_p2p) return false;  // the peer is inside a collective; wait for it
      if (h.seq != x.header.seq) return ContinueStash(ch);
      if (h.sig != x.header.sig) return P2PTypeMismatch(h.sig, x, ch.Describe());
      if (h.length > x.header.length) {
        return Status(Code::kBufferTooSmall,
                      "message with tag " + std::to_string(h.seq) + " from " + ch.Describe() +
                          " has " + std::to_string(h.length) + " bytes but the receive buffer holds " +
                          std::to_string(x.header.length));
      }
      x.matched_length = h.length;
      x.matched_peer = ch.peer();
    } else {
      if (got_p2p) return ContinueStash(ch);
      if (!SameSignature(h, x.header) || h.length != x.header.length) {
        return hooks.observer ? hooks.observer->Mismatch(x.header, h, ch.peer())
                                 : Status(Code::kCollectiveMismatch,
                                          "unexpected message from " + ch.Describe());
      }
    }
    x.header_done = true;
  }
  return ch.ReadPayload(x);
}

Result<bool> Endpoint::StepAnySource(Xfer& x, const RunHooks& hooks) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    CHOIR_ASSIGN_OR_RETURN(const bool taken, TakeFromStash(x, p));
    if (taken) return true;
  }
  bool progressed = false;
  for (int p = 0; p < size_; ++p) {
    Channel* ch = channels_[static_cast<size_t>(p)].get();
    if (ch == nullptr) continue;
    if (stash_progress_[static_cast<size_t>(p)].active) {
      CHOIR_ASSIGN_OR_RETURN(bool moved, ContinueStash(*ch));
      progressed |= moved;
      continue;
    }
    CHOIR_ASSIGN_OR_RETURN(bool have, ch->PollHeader());
    if (!have) continue;
    const MsgHeader& h = ch->incoming();
    if (h.kind == static_cast<uint32_t>(MsgKind::kAbort)) return ReadAbortMessage(*ch);
    if (h.kind == static_cast<uint32_t>(MsgKind::kBye)) continue;  // left; another rank may still send
    if (h.kind != static_cast<uint32_t>(MsgKind::kP2P)) continue;
    if (h.seq == x.header.seq) {
      x.peer = p;
      return StepRecv(x, *ch, hooks);
    }
    CHOIR_ASSIGN_OR_RETURN(bool moved, ContinueStash(*ch));
    progressed |= moved;
  }
  return progressed;
}

Result<bool> Endpoint::Step(Xfer& x, const RunHooks& hooks) {
  if (x.dir == Xfer::Dir::kRecv && x.peer < 0) return StepAnySource(x, hooks);
  Channel* ch = channels_[static_cast<size_t>(x.peer)].get();
  if (ch == nullptr) return InternalError("no channel from rank " + std::to_string(rank_) + " to itself");
  if (x.dir == Xfer::Dir::kSend) return ch->AdvanceSend(x);
  return StepRecv(x, *ch, hooks);
}

Status Endpoint::CheckPeers(std::span<Xfer> xfers) {
  for (auto& ch : channels_) {
    if (ch == nullptr) continue;
    // A peer's abort record (shm) explains more than its silence.
    CHOIR_RETURN_IF_ERROR(ch->RemoteAbort());
    // Peek at peers this step does not wait for: an abort message or a closed
    // connection there means the collective can never complete. Reading a
    // header early is harmless; it stays buffered for the step that wants it.
    // A peer that said bye has left cleanly: it is not needed by this step, and
    // its bye stays buffered so that a step that does need it reports Departed().
    CHOIR_ASSIGN_OR_RETURN(bool have, ch->PollHeader());
    if (have && ch->incoming().kind == static_cast<uint32_t>(MsgKind::kAbort) &&
        !stash_progress_[static_cast<size_t>(ch->peer())].active) {
      return ReadAbortMessage(*ch);
    }
  }
  for (const Xfer& x : xfers) {
    if (x.complete || x.peer < 0) continue;
    Channel* ch = channels_[static_cast<size_t>(x.peer)].get();
    if (ch) CHOIR_RETURN_IF_ERROR(ch->CheckAlive());
  }
  return Status::Ok();
}

Status Endpoint::Departed(const Channel& ch, const Xfer& x) const {
  const bool p2p = x.header.kind == static_cast<uint32_t>(MsgKind::kP2P);
  return Status(Code::kPeerLost,
                ch.Describe() + " left the communicator (destroyed it, or its process ended normally) while this rank still expected " +
                    (p2p ? "a message with tag " + std::to_string(x.header.seq)
                         : "data of collective #" + std::to_string(x.header.seq)) +
                    " from it: the ranks did not run the same sequence of operations; check that every rank "
                    "makes the same collective calls before it exits");
}

Status Endpoint::Explain(const Status& status) {
  if (status.code() != Code::kPeerLost) return status;
  // A peer that closed its connection usually did so because another rank
  // failed first and told everyone; that report is the better explanation.
  for (auto& ch : channels_) {
    if (ch == nullptr) continue;
    if (!ch->RemoteAbort().ok()) return ch->RemoteAbort();
    auto have = ch->PollHeader();
    if (have.ok() && *have && ch->incoming().kind == static_cast<uint32_t>(MsgKind::kAbort) &&
        !stash_progress_[static_cast<size_t>(ch->peer())].active) {
      return ReadAbortMessage(*ch);
    }
  }
  return status;
}

Status Endpoint::Timeout(std::span<Xfer> xfers, double waited) const {
  std::vector<std::string> owing;
  for (const Xfer& x : xfers) {
    if (x.complete) continue;
    std::string what = x.dir == Xfer::Dir::kSend ? "sending to " : "receiving from ";
    if (x.peer < 0) {
      what += "any rank";
    } else {
      what += channels_[static_cast<size_t>(x.peer)]->Describe();
    }
    what += " (" + strings::FormatBytes(x.done) + " of " + strings::FormatBytes(x.header.length) + ")";
    owing.push_back(what);
  }
  std::string msg = "no progress for " + fmt::format("{:.1f}", waited) + " s while ";
  for (size_t i = 0; i < owing.size(); ++i) msg += (i ? ", " : "") + owing[i];
  return Status(Code::kCollectiveTimeout, msg);
}

bool RanksCompeteForCpus(const std::vector<std::vector<int>>& cpus_of_ranks, int online_cpus) {
  std::map<int, double> load;
  for (const std::vector<int>& cpus : cpus_of_ranks) {
    if (cpus.empty()) return static_cast<int>(cpus_of_ranks.size()) > online_cpus;
    for (int cpu : cpus) load[cpu] += 1.0 / static_cast<double>(cpus.size());
  }
  for (const auto& [cpu, work] : load) {
    if (work > 1.0 + 1e-9) return true;
  }
  return false;
}

Status Endpoint::WaitLocal(absl::FunctionRef<bool(int)> owes, const RunHooks& hooks,
                           absl::FunctionRef<std::string()> waiting_for, bool marks_data) {
  const int n = local_ ? static_cast<int>(local_->ranks.size()) : 0;
  const int me = local_ ? local_->index : -1;
  auto ready = [&] {
    for (int i = 0; i < n; ++i) {
      if (i != me && owes(i)) return false;
    }
    return true;
  };
  if (ready()) return Status::Ok();
  // Busy-polls in bursts only while the policy says spin: once a rank yields
  // (always, when ranks outnumber cores) a burst of pauses would only delay
  // handing the core to the peer being waited for.
  bool spinning = policy_.spin_ns > 0;
  // The clock is first read after the first round of polls: most waits end
  // before, and cost no clock read (nor count as a wait for the metric).
  int64_t start = 0;
  int64_t last_check = 0;
  int64_t last_stall = 0;
  SegmentHeader* h = own_segment_ ? own_segment_->header() : nullptr;
  auto arrived = [&] {
    if (start != 0 && marks_data && hooks.first_data_ns != nullptr && *hooks.first_data_ns == 0) {
      *hooks.first_data_ns = OpNanos();
    }
    return Status::Ok();
  };
  while (true) {
    if (spinning) {
      for (int i = 0; i < 64; ++i) {
        _mm_pause();
        if (ready()) return arrived();
      }
    } else if (ready()) {
      return arrived();
    }
    if (abort_requested_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(g_abort_mu);
      return abort_status_;
    }
    const int64_t now = NowNanos();
    if (start == 0) start = last_check = last_stall = now;
    if (now - last_check > kMaxSleepNs) {
      last_check = now;
      CHOIR_RETURN_IF_ERROR(CheckPeers({}));
      for (int i = 0; i < n; ++i) {
        const int r = local_->ranks[static_cast<size_t>(i)];
        Channel* ch = r == rank_ ? nullptr : channels_[static_cast<size_t>(r)].get();
        if (ch == nullptr) continue;
        // A peer that left cleanly is no failure unless this wait needs it.
        if (!ch->Departed()) {
          CHOIR_RETURN_IF_ERROR(ch->CheckAlive());
        } else if (owes(i)) {
          return Status(Code::kPeerLost, ch->Describe() + " left the communicator (destroyed it) while this rank still "
                                                          "expected data from it: the ranks did not run the same "
                                                          "sequence of operations");
        }
      }
    }
    if (hooks.deadline.ExpiredAt(now)) {
      CHOIR_RETURN_IF_ERROR(CheckPeers({}));
      return Status(Code::kCollectiveTimeout,
                    fmt::format("no progress for {:.1f} s while waiting for {}",
                                static_cast<double>(now - start) * 1e-9, waiting_for()));
    }
    if (hooks.stall_seconds > 0 && hooks.observer &&
        now - last_stall > static_cast<int64_t>(hooks.stall_seconds * 1e9)) {
      last_stall = now;
      CHOIR_RETURN_IF_ERROR(hooks.observer->Stall(static_cast<double>(now - start) * 1e-9));
    }
    const WaitPolicy::Step step = policy_.Next(now - start);
    spinning = step == WaitPolicy::Step::kSpin;
    if (spinning) continue;
    if (step == WaitPolicy::Step::kYield || h == nullptr) {
      sched_yield();
      continue;
    }
    const uint32_t seen = h->doorbell.load(std::memory_order_acquire);
    const int64_t cap = AnnounceSleep(h, std::min<int64_t>(hooks.deadline.RemainingNanos(), kMaxSleepNs));
    if (!ready() && !abort_requested_.load(std::memory_order_acquire)) WaitSegment(h, seen, cap);
    h->sleeping.store(0, std::memory_order_relaxed);
  }
}

void Endpoint::WaitTcp(const RunHooks& hooks, bool shm_pending) {
  // With local peers also pending, sleep only briefly: their progress does
  // not show up in epoll.
  const int64_t cap = std::min<int64_t>(hooks.deadline.RemainingNanos(), kMaxSleepNs);
  const int timeout_ms = shm_pending ? 1 : static_cast<int>(std::max<int64_t>(1, cap / 1000000));
  if (hooks.return_when != nullptr && (*hooks.return_when)()) return;
  epoll_event events[16];
  const int n = epoll_wait(epoll_fd_.get(), events, 16, timeout_ms);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u32 == UINT32_MAX) {
      uint64_t count = 0;
      [[maybe_unused]] ssize_t r = read(wake_fd_.get(), &count, sizeof(count));
    }
  }
}

Status Endpoint::Run(std::span<Xfer> xfers, const RunHooks& hooks) {
  // Per peer, only the first incomplete send and receive may move: messages
  // between two ranks stay in the order the algorithm posted them.
  std::vector<int> first_send(static_cast<size_t>(size_), -1), first_recv(static_cast<size_t>(size_), -1);
  int64_t idle_since = 0;
  int64_t last_check = NowNanos();
  int64_t last_stall = 0;
  const int64_t start = NowNanos();
  int first_any = -1;  // the receive from any source the last pass moved
  while (true) {
    std::fill(first_send.begin(), first_send.end(), -1);
    std::fill(first_recv.begin(), first_recv.end(), -1);
    bool all_done = true;
    bool progressed = false;
    bool completed = false;
    bool tcp_pending = false;
    bool shm_pending = false;
    // Receives from any source match in the order they were posted: one
    // moves only when no earlier receive is open, and receives after it wait
    // until it is matched (point-to-point only; collectives name their peers).
    bool recv_open = false;
    bool recvs_held = false;
    first_any = -1;
    for (size_t i = 0; i < xfers.size(); ++i) {
      Xfer& x = xfers[i];
      if (x.complete) continue;
      all_done = false;
      const bool recv = x.dir == Xfer::Dir::kRecv;
      if (recv && recvs_held) continue;
      if (x.peer >= 0) {
        auto& first = recv ? first_recv : first_send;
        if (first[static_cast<size_t>(x.peer)] >= 0) {
          recv_open |= recv;
          continue;
        }
        first[static_cast<size_t>(x.peer)] = static_cast<int>(i);
        (kind(x.peer) == TransportKind::kTcp ? tcp_pending : shm_pending) = true;
      } else {
        if (recv_open) {
          recvs_held = true;
          continue;
        }
        first_any = static_cast<int>(i);
        tcp_pending = shm_pending = true;
      }
      auto r = Step(x, hooks);
      if (!r.ok()) return Explain(r.status());
      if (recv && !x.complete) {
        recv_open = true;
        recvs_held |= x.peer < 0;
      }
      if (*r) {
        progressed = true;
        if (x.dir == Xfer::Dir::kRecv && hooks.first_data_ns != nullptr && *hooks.first_data_ns == 0) {
          *hooks.first_data_ns = OpNanos();
        }
        completed |= x.complete;
        if (x.complete && metrics_ != nullptr && x.peer >= 0) {
          const bool send = x.dir == Xfer::Dir::kSend;
          metrics_->AddPeerBytes(x.peer, kind(x.peer) == TransportKind::kTcp ? 1 : 0,
                                 send ? x.header.length : 0, send ? 0 : x.done);
        }
      }
    }
    if (all_done) return Status::Ok();
    if (abort_requested_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(g_abort_mu);
      return abort_status_;
    }
    if ((completed && hooks.return_on_completion) || (!progressed && hooks.return_when_idle) ||
        (hooks.return_when != nullptr && (*hooks.return_when)())) {
      return Status::Ok();
    }
    if (progressed) {
      idle_since = 0;
      continue;
    }
    const int64_t now = NowNanos();
    if (idle_since == 0) idle_since = now;
    if (now - last_check > kMaxSleepNs) {
      last_check = now;
      CHOIR_RETURN_IF_ERROR(CheckPeers(xfers));
    }
    if (hooks.deadline.Expired()) {
      CHOIR_RETURN_IF_ERROR(CheckPeers(xfers));
      return Timeout(xfers, static_cast<double>(now - start) * 1e-9);
    }
    if (hooks.stall_seconds > 0 && hooks.observer &&
        now - std::max(idle_since, last_stall) > static_cast<int64_t>(hooks.stall_seconds * 1e9)) {
      last_stall = now;
      CHOIR_RETURN_IF_ERROR(hooks.observer->Stall(static_cast<double>(now - start) * 1e-9));
    }
    const WaitPolicy::Step step = policy_.Next(now - idle_since);
    if (step == WaitPolicy::Step::kSpin) {
      for (int i = 0; i < 16; ++i) _mm_pause();
      continue;
    }
    if (step == WaitPolicy::Step::kYield) {
      sched_yield();
      continue;
    }
    // Announce that we sleep, re-check once (a peer may have published just
    // before seeing the flag), then sleep until a doorbell, epoll event or cap.
    if (shm_pending && own_segment_ != nullptr && !tcp_pending) {
      SegmentHeader* h = own_segment_->header();
      const uint32_t seen = h->doorbell.load(std::memory_order_acquire);
      const int64_t cap = AnnounceSleep(h, std::min<int64_t>(hooks.deadline.RemainingNanos(), kMaxSleepNs));
      bool moved = false;
      for (size_t i = 0; i < xfers.size() && !moved; ++i) {
        Xfer& x = xfers[i];
        if (x.complete) continue;
        if (x.peer >= 0) {
          auto& first = x.dir == Xfer::Dir::kSend ? first_send : first_recv;
          if (first[static_cast<size_t>(x.peer)] != static_cast<int>(i)) continue;
        } else if (first_any != static_cast<int>(i)) {
          continue;
        }
        auto r = Step(x, hooks);
        if (!r.ok()) {
          h->sleeping.store(0, std::memory_order_relaxed);
          return r.status();
        }
        moved |= *r;
        if (x.complete && hooks.return_on_completion) {
          h->sleeping.store(0, std::memory_order_relaxed);
          return Status::Ok();
        }
      }
      if (!moved && !abort_requested_.load(std::memory_order_acquire) &&
          (hooks.return_when == nullptr || !(*hooks.return_when)())) {
        WaitSegment(h, seen, cap);
      }
      h->sleeping.store(0, std::memory_order_relaxed);
      if (moved) idle_since = 0;
      continue;
    }
    WaitTcp(hooks, shm_pending);
  }
}

}  // namespace choir::transport
