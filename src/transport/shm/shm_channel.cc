#include "transport/shm/shm_channel.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kernels/reduce.h"

namespace choir::transport {
namespace {
constexpr uint64_t kAlign = 64;
// Largest piece published at once, so the reader can start before the writer ends.
constexpr uint64_t kPieceBytes = 256 * 1024;

uint64_t RoundUp(uint64_t v) { return (v + kAlign - 1) & ~(kAlign - 1); }

// Copies `n` bytes into a ring at byte position `pos`, wrapping at `cap`.
void CopyIn(uint8_t* ring, uint64_t cap, uint64_t pos, const uint8_t* src, uint64_t n) {
  const uint64_t off = pos % cap;
  const uint64_t first = std::min(n, cap - off);
  kernels::CopyBytes(ring + off, src, first, /*nontemporal=*/false);  // not memcpy: see kernels::CopyAliased
  if (first < n) kernels::CopyBytes(ring, src + first, n - first, /*nontemporal=*/false);
}
}  // namespace

ShmChannel::ShmChannel(int peer, int peer_pid, Segment* own, Segment* peer_segment, int my_slot,
                       int peer_slot)
    : peer_(peer),
      peer_pid_(peer_pid),
      own_(own),
      peer_seg_(peer_segment),
      out_(peer_segment->ring_ctl(my_slot)),
      out_data_(peer_segment->ring_data(my_slot)),
      in_(own->ring_ctl(peer_slot)),
      in_data_(own->ring_data(peer_slot)),
      cap_(own->ring_bytes()) {
  pidfd_.Reset(static_cast<int>(syscall(SYS_pidfd_open, peer_pid, 0)));
  out_head_ = out_->head.load(std::memory_order_relaxed);
  out_tail_cache_ = out_->tail.load(std::memory_order_acquire);
  in_tail_ = in_->tail.load(std::memory_order_relaxed);
}

std::string ShmChannel::Describe() const {
  return "rank " + std::to_string(peer_) + " (shm, pid " + std::to_string(peer_pid_) + ")";
}

Result<bool> ShmChannel::AdvanceSend(Xfer& x) {
  const uint64_t cap = peer_seg_->ring_bytes();
  uint64_t free = cap - (out_head_ - out_tail_cache_);
  if (free < kAlign || (x.header_done && free < std::min<uint64_t>(x.header.length - x.done, kPieceBytes))) {
    out_tail_cache_ = out_->tail.load(std::memory_order_acquire);
    free = cap - (out_head_ - out_tail_cache_);
  }
  bool progressed = false;
  if (!x.header_done) {
    if (free < kAlign) return false;
    uint8_t record[kAlign] = {0};
    std::memcpy(record, &x.header, sizeof(MsgHeader));
    CopyIn(out_data_, cap, out_head_, record, kAlign);
    out_head_ += kAlign;
    free -= kAlign;
    x.header_done = true;
    progressed = true;
  }
  while (x.done < x.header.length && free > 0) {
    const uint64_t left = x.header.length - x.done;
    uint64_t n = std::min({left, free, kPieceBytes});
    if (n < left) n &= ~(kAlign - 1);  // inner pieces keep records 64-byte aligned
    if (n == 0) break;
    CopyIn(out_data_, cap, out_head_, x.send_data + x.done, n);
    x.done += n;
    out_head_ += RoundUp(n);  // only the last piece is padded
    free -= RoundUp(n);
    progressed = true;
    out_->head.store(out_head_, std::memory_order_release);
    NotifySegment(peer_seg_->header());
  }
  if (progressed) {
    out_->head.store(out_head_, std::memory_order_release);
    NotifySegment(peer_seg_->header());
  }
  if (x.done == x.header.length) x.complete = true;
  return progressed;
}

Result<bool> ShmChannel::PollHeader() {
  if (have_header_) return true;
  const uint64_t head = in_->head.load(std::memory_order_acquire);
  if (head - in_tail_ < kAlign) return false;
  std::memcpy(&in_header_, in_data_ + in_tail_ % cap_, sizeof(MsgHeader));
  if (in_header_.magic != kMessageMagic || !IsValidKind(in_header_.kind)) {
    return Status(Code::kProtocolError, "corrupt message header in the ring from " + Describe());
  }
  in_tail_ += kAlign;
  in_->tail.store(in_tail_, std::memory_order_release);
  have_header_ = true;
  if (in_header_.length == 0) NotifySegment(peer_seg_->header());
  return true;
}

Result<bool> ShmChannel::ReadPayload(Xfer& x) {
  const uint64_t total = in_header_.length;
  bool progressed = false;
  while (x.done < total) {
    const uint64_t head = in_->head.load(std::memory_order_acquire);
    uint64_t avail = std::min<uint64_t>(head - in_tail_, total - x.done);
    if (avail == 0) break;
    if (x.reduce != nullptr) avail -= avail % x.elem_size;
    const uint64_t off = in_tail_ % cap_;
    const uint64_t first = std::min(avail, cap_ - off);
    const uint64_t parts[2][2] = {{off, first}, {0, avail - first}};
    for (const auto& part : parts) {
      if (part[1] == 0) continue;
      uint8_t* dst = x.recv_data + x.done;
      if (x.reduce != nullptr) {
        x.reduce(dst, x.operand + x.done, in_data_ + part[0], part[1] / x.elem_size);
      } else {
        kernels::CopyBytes(dst, in_data_ + part[0], part[1], /*nontemporal=*/false);
      }
      x.done += part[1];
    }
    in_tail_ += avail;
    progressed = true;
    if (x.done == total) in_tail_ = RoundUp(in_tail_);
    in_->tail.store(in_tail_, std::memory_order_release);
    NotifySegment(peer_seg_->header());
  }
  if (x.done == total) {
    if (!progressed && total == 0) progressed = true;
    x.complete = true;
    have_header_ = false;
  }
  return progressed;
}

Status ShmChannel::CheckAlive() {
  bool dead = false;
  if (pidfd_.valid()) {
    pollfd p{pidfd_.get(), POLLIN, 0};
    dead = poll(&p, 1, 0) == 1;
  } else {
    dead = kill(peer_pid_, 0) != 0 && errno == ESRCH;
  }
  if (!dead) return Status::Ok();
  CHOIR_RETURN_IF_ERROR(RemoteAbort());
  if (Departed()) {
    return Status(Code::kPeerLost, Describe() + " left the communicator (destroyed it, and its process ended "
                                                "normally) while this rank still expected data from it: the "
                                                "ranks did not run the same sequence of operations");
  }
  return Status(Code::kPeerLost, Describe() + " exited while this rank was waiting for it; "
                                              "it was probably killed or crashed (see its output)");
}

void ShmChannel::SendAbort(int code, const std::string& text) {
  // Our abort record lives in our own segment; every local peer sees it.
  SegmentHeader* h = own_->header();
  if (h->abort_code.load(std::memory_order_acquire) == 0) {
    const size_t n = std::min(text.size(), sizeof(h->abort_text) - 1);
    std::memcpy(h->abort_text, text.data(), n);
    h->abort_text[n] = '\0';
    h->abort_code.store(code == 0 ? static_cast<int>(Code::kRemoteError) : code,
                        std::memory_order_release);
  }
  ForceWakeSegment(peer_seg_->header());
}

void ShmChannel::SendBye() { own_->header()->departed.store(1, std::memory_order_release); }

bool ShmChannel::Departed() const {
  return peer_seg_->header()->departed.load(std::memory_order_acquire) != 0;
}

Status ShmChannel::RemoteAbort() {
  SegmentHeader* h = peer_seg_->header();
  const int code = h->abort_code.load(std::memory_order_acquire);
  if (code == 0) return Status::Ok();
  return RemoteFailure(*this, code, std::string(h->abort_text, strnlen(h->abort_text, sizeof(h->abort_text))));
}

}  // namespace choir::transport
