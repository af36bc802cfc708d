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
  for (const auto& ch : channels_) has_tcp_ |= ch != nullptr && ch->kind() == TransportKind::kTcp;
  last_peer_check_ns_ = NowNanos();
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
  Wake();
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

Result<bool> Endpoint::StepAnySource(Xfer& x, const RunHooks& hooks, const uint8_t* skip) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || (skip != nullptr && skip[p] != 0)) continue;
    CHOIR_ASSIGN_OR_RETURN(const bool taken, TakeFromStash(x, p));
    if (taken) return true;
  }
  bool progressed = false;
  for (int p = 0; p < size_; ++p) {
    Channel* ch = channels_[static_cast<size_t>(p)].get();
    if (ch == nullptr || (skip != nullptr && skip[p] != 0)) continue;
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

Result<bool> Endpoint::Step(Xfer& x, const RunHooks& hooks, const uint8_t* skip) {
  if (x.dir == Xfer::Dir::kRecv && x.peer < 0) return StepAnySource(x, hooks, skip);
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

bool RanksCompeteForCpus(const std::vector<std::vector<int>>& cpus_of_ranks, int online_cpus,
                         int threads_per_rank) {
  std::map<int, double> load;
  const double threads = threads_per_rank;
  for (const std::vector<int>& cpus : cpus_of_ranks) {
    if (cpus.empty()) return static_cast<double>(cpus_of_ranks.size()) * threads > online_cpus;
    for (int cpu : cpus) load[cpu] += threads / static_cast<double>(cpus.size());
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
      last_peer_check_ns_ = now;
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

namespace {

// A point-to-point receive (several may be open per peer, from any source too).
bool IsP2PRecv(const Xfer& x) {
  return x.dir == Xfer::Dir::kRecv && x.header.kind == static_cast<uint32_t>(MsgKind::kP2P);
}

// Whether open receive `y` waits for messages with `x`'s tag.
bool OpenWithTagOf(const Xfer& y, const Xfer& x) {
  return !y.complete && y.dir == Xfer::Dir::kRecv && y.header.kind == x.header.kind && y.header.seq == x.header.seq;
}

// Marks the channel receive `x` is halfway through a message on as its own.
void MarkMidMessage(const Xfer& x, std::vector<uint8_t>& mid_message) {
  const int from = x.peer >= 0 ? x.peer : x.matched_peer;
  if (from >= 0) mid_message[static_cast<size_t>(from)] = 1;
}

}  // namespace

bool Endpoint::P2PReceiveMayMove(std::span<const Xfer> xfers, size_t i, const std::vector<uint8_t>& mid_message,
                                  std::vector<uint8_t>& skip) {
  const Xfer& x = xfers[i];
  if (x.header_done) return true;  // it is reading its message: the channel is its own
  if (x.peer >= 0) {
    // Another receive is halfway through a message on this channel.
    if (mid_message[static_cast<size_t>(x.peer)] != 0) return false;
    // An earlier open receive that could take the same message (its tag,
    // from this peer or any) goes first: messages with one tag match the
    // receives in the order they were posted.
    for (size_t j = 0; j < i; ++j) {
      const Xfer& y = xfers[j];
      if (OpenWithTagOf(y, x) && (y.peer < 0 || y.peer == x.peer)) return false;
    }
    return true;
  }
  // From any source: an earlier open receive from any source with its tag
  // goes first; peers whose channel is halfway through another receive's
  // message, or whose messages with this tag an earlier receive from them
  // takes first, are left out (`skip`).
  skip.assign(mid_message.begin(), mid_message.end());
  for (size_t j = 0; j < i; ++j) {
    const Xfer& y = xfers[j];
    if (!OpenWithTagOf(y, x)) continue;
    if (y.peer < 0) return false;
    skip[static_cast<size_t>(y.peer)] = 1;
  }
  return true;
}

Status Endpoint::Run(std::span<Xfer> xfers, const RunHooks& hooks) {
  // Per peer, only the first incomplete send and receive may move: messages
  // between two ranks stay in the order the algorithm posted them.
  // Scratch kept across calls (point-to-point progress calls Run often).
  std::vector<int>& first_send = run_first_send_;
  std::vector<int>& first_recv = run_first_recv_;
  first_send.resize(static_cast<size_t>(size_));
  first_recv.resize(static_cast<size_t>(size_));
  int64_t idle_since = 0;
  // Dead peers are looked for every kMaxSleepNs of waiting, counted across
  // calls: point-to-point progress restarts Run often.
  int64_t last_check = last_peer_check_ns_;
  int64_t last_stall = 0;
  const int64_t start = hooks.waiting_since_ns != 0 ? std::min(hooks.waiting_since_ns, NowNanos()) : NowNanos();
  // Point-to-point receives (several per peer may be pending, from any
  // source too): which ones moved in the last pass, and per peer whether one
  // is halfway through a message (its channel then belongs to it).
  bool p2p_recvs = false;
  for (const Xfer& x : xfers) p2p_recvs |= IsP2PRecv(x);
  std::vector<int>& p2p_moved = run_p2p_moved_;
  std::vector<uint8_t>& mid_message = run_mid_message_;
  std::vector<uint8_t>& skip = run_any_skip_;
  while (true) {
    std::fill(first_send.begin(), first_send.end(), -1);
    std::fill(first_recv.begin(), first_recv.end(), -1);
    bool all_done = true;
    bool progressed = false;
    bool completed = false;
    bool tcp_pending = false;
    bool shm_pending = false;
    if (p2p_recvs) {
      p2p_moved.clear();
      mid_message.assign(static_cast<size_t>(size_), 0);
      for (const Xfer& x : xfers) {
        if (x.dir == Xfer::Dir::kRecv && !x.complete && x.header_done) MarkMidMessage(x, mid_message);
      }
    }
    for (size_t i = 0; i < xfers.size(); ++i) {
      Xfer& x = xfers[i];
      if (x.complete) continue;
      all_done = false;
      const uint8_t* any_skip = nullptr;
      if (IsP2PRecv(x)) {
        if (!P2PReceiveMayMove(xfers, i, mid_message, skip)) continue;
        if (x.peer < 0) any_skip = skip.data();
        p2p_moved.push_back(static_cast<int>(i));
        if (x.peer >= 0) {
          (kind(x.peer) == TransportKind::kTcp ? tcp_pending : shm_pending) = true;
        } else {
          shm_pending = true;
          tcp_pending |= has_tcp_;
        }
      } else {
        auto& first = x.dir == Xfer::Dir::kRecv ? first_recv : first_send;
        if (first[static_cast<size_t>(x.peer)] >= 0) continue;
        first[static_cast<size_t>(x.peer)] = static_cast<int>(i);
        (kind(x.peer) == TransportKind::kTcp ? tcp_pending : shm_pending) = true;
      }
      auto r = Step(x, hooks, any_skip);
      if (!r.ok()) return Explain(r.status());
      if (p2p_recvs && x.dir == Xfer::Dir::kRecv && x.header_done && !x.complete) {
        MarkMidMessage(x, mid_message);  // later receives of this pass see it
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
    if ((completed && hooks.return_on_completion) || (hooks.return_when != nullptr && (*hooks.return_when)())) {
      return Status::Ok();
    }
    if (progressed) {
      idle_since = 0;
      continue;
    }
    const int64_t now = NowNanos();
    if (idle_since == 0) idle_since = now;
    if (now - last_check > kMaxSleepNs) {
      last_check = last_peer_check_ns_ = now;
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
    if (hooks.return_when_idle && step != WaitPolicy::Step::kSpin) return Status::Ok();
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
        const uint8_t* any_skip = nullptr;
        if (IsP2PRecv(x)) {
          if (std::find(p2p_moved.begin(), p2p_moved.end(), static_cast<int>(i)) == p2p_moved.end()) continue;
          if (!P2PReceiveMayMove(xfers, i, mid_message, skip)) continue;
          if (x.peer < 0) any_skip = skip.data();
        } else {
          auto& first = x.dir == Xfer::Dir::kSend ? first_send : first_recv;
          if (first[static_cast<size_t>(x.peer)] != static_cast<int>(i)) continue;
        }
        auto r = Step(x, hooks, any_skip);
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
