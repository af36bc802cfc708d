#include "transport/tcp/tcp_channel.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/logging.h"

namespace choir::transport {
namespace {
// Payloads at least this large are read straight into the destination.
constexpr size_t kDirectReadBytes = 16 * 1024;
constexpr size_t kPartAlign = 64;  // part boundaries: a multiple of every element size

enum class IoResult { kMoved, kWouldBlock, kClosed, kError };

IoResult Classify(ssize_t n, int* err) {
  if (n > 0) return IoResult::kMoved;
  if (n == 0) return IoResult::kClosed;
  *err = errno;
  if (*err == EINTR || *err == EAGAIN || *err == EWOULDBLOCK) return IoResult::kWouldBlock;
  if (*err == ECONNRESET || *err == EPIPE) return IoResult::kClosed;
  return IoResult::kError;
}
}  // namespace

TcpChannel::TcpChannel(std::vector<Fd> fds, int peer, std::string address, size_t chunk_bytes,
                       size_t stripe_bytes)
    : fds_(std::move(fds)),
      peer_(peer),
      address_(std::move(address)),
      stripe_bytes_(std::max<size_t>(stripe_bytes, kPartAlign * 4)),
      send_off_(fds_.size(), 0),
      recv_off_(fds_.size(), 0),
      stage_(fds_.size()),
      stage_len_(fds_.size(), 0),
      chunk_bytes_(std::max<size_t>(chunk_bytes, 64 * 1024)) {
  in_.resize(chunk_bytes_);
}

TcpChannel::~TcpChannel() = default;

std::string TcpChannel::Describe() const {
  return "rank " + std::to_string(peer_) + " (tcp " + address_ + ")";
}

std::vector<int> TcpChannel::poll_fds() const {
  std::vector<int> out;
  for (const auto& f : fds_) out.push_back(f.get());
  return out;
}

Status TcpChannel::Closed(const char* while_doing) const {
  return Status(Code::kPeerLost, Describe() + " closed the connection while this rank was " +
                                     while_doing + "; the peer process probably exited or crashed");
}

TcpChannel::Part TcpChannel::PartOf(uint64_t length, size_t k) const {
  const size_t streams = fds_.size();
  if (streams == 1 || length < stripe_bytes_) return k == 0 ? Part{0, length} : Part{length, length};
  auto boundary = [&](size_t i) -> size_t {
    if (i >= streams) return length;
    return std::min<size_t>(length, (length / streams * i) / kPartAlign * kPartAlign);
  };
  return Part{boundary(k), boundary(k + 1)};
}

Result<bool> TcpChannel::SendStream0(Xfer& x, const Part& part) {
  bool progressed = false;
  while (!x.header_done || send_off_[0] < part.end) {
    iovec iov[2];
    int n_iov = 0;
    if (!x.header_done) {
      iov[n_iov++] = {reinterpret_cast<uint8_t*>(&x.header) + header_sent_, sizeof(MsgHeader) - header_sent_};
    }
    if (send_off_[0] < part.end) {
      iov[n_iov++] = {const_cast<uint8_t*>(x.send_data) + send_off_[0], part.end - send_off_[0]};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n_iov);
    int err = 0;
    const ssize_t n = sendmsg(fd(0), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    switch (Classify(n, &err)) {
      case IoResult::kWouldBlock: return progressed;
      case IoResult::kClosed: return Closed("sending");
      case IoResult::kError: return ErrnoError(Code::kSocketError, err, "send() to " + Describe());
      case IoResult::kMoved: break;
    }
    progressed = true;
    mid_message_ = true;
    size_t sent = static_cast<size_t>(n);
    if (!x.header_done) {
      const size_t h = std::min(sent, sizeof(MsgHeader) - header_sent_);
      header_sent_ += h;
      sent -= h;
      if (header_sent_ == sizeof(MsgHeader)) {
        x.header_done = true;
        header_sent_ = 0;
      }
    }
    send_off_[0] += sent;
  }
  return progressed;
}

Result<bool> TcpChannel::SendStream(Xfer& x, size_t k, const Part& part) {
  bool progressed = false;
  while (send_off_[k] < part.end) {
    int err = 0;
    const ssize_t n = send(fd(k), x.send_data + send_off_[k], part.end - send_off_[k], MSG_NOSIGNAL | MSG_DONTWAIT);
    switch (Classify(n, &err)) {
      case IoResult::kWouldBlock: return progressed;
      case IoResult::kClosed: return Closed("sending");
      case IoResult::kError: return ErrnoError(Code::kSocketError, err, "send() to " + Describe());
      case IoResult::kMoved: break;
    }
    progressed = true;
    mid_message_ = true;
    send_off_[k] += static_cast<size_t>(n);
  }
  return progressed;
}

Result<bool> TcpChannel::AdvanceSend(Xfer& x) {
  if (aborted_.load(std::memory_order_relaxed)) {
    return Status(Code::kAborted, "the connection to " + Describe() + " was shut down by Abort()");
  }
  if (!send_active_) {
    for (size_t k = 0; k < fds_.size(); ++k) send_off_[k] = PartOf(x.header.length, k).begin;
    send_active_ = true;
  }
  bool progressed = false;
  bool all_done = true;
  size_t done = 0;
  for (size_t k = 0; k < fds_.size(); ++k) {
    const Part part = PartOf(x.header.length, k);
    CHOIR_ASSIGN_OR_RETURN(bool moved, k == 0 ? SendStream0(x, part) : SendStream(x, k, part));
    progressed |= moved;
    all_done = all_done && send_off_[k] == part.end;
    done += send_off_[k] - part.begin;
  }
  x.done = done;
  if (all_done && x.header_done) {
    x.complete = true;
    send_active_ = false;
    mid_message_ = false;
  }
  return progressed;
}

Result<bool> TcpChannel::Fill() {
  if (in_pos_ == in_end_) {
    in_pos_ = in_end_ = 0;
  } else if (in_pos_ > 0 && in_end_ == in_.size()) {
    std::memmove(in_.data(), in_.data() + in_pos_, buffered());
    in_end_ -= in_pos_;
    in_pos_ = 0;
  }
  if (in_end_ == in_.size()) return false;
  int err = 0;
  while (true) {
    const ssize_t n = recv(fd(0), in_.data() + in_end_, in_.size() - in_end_, MSG_DONTWAIT);
    switch (Classify(n, &err)) {
      case IoResult::kMoved:
        in_end_ += static_cast<size_t>(n);
        return true;
      case IoResult::kWouldBlock:
        if (err == EINTR) continue;
        return false;
      case IoResult::kClosed: return Closed("receiving");
      case IoResult::kError: return ErrnoError(Code::kSocketError, err, "recv() from " + Describe());
    }
  }
}

Result<bool> TcpChannel::PollHeader() {
  if (have_header_) return true;
  if (buffered() < sizeof(MsgHeader)) {
    if (in_.size() - in_pos_ < sizeof(MsgHeader)) {
      std::memmove(in_.data(), in_.data() + in_pos_, buffered());
      in_end_ -= in_pos_;
      in_pos_ = 0;
    }
    CHOIR_ASSIGN_OR_RETURN(bool got, Fill());
    if (!got || buffered() < sizeof(MsgHeader)) return false;
  }
  std::memcpy(&in_header_, in_.data() + in_pos_, sizeof(MsgHeader));
  in_pos_ += sizeof(MsgHeader);
  if (in_header_.magic != kMessageMagic || !IsValidKind(in_header_.kind)) {
    return Status(Code::kProtocolError,
                  "bad message header from " + Describe() + " (magic " + std::to_string(in_header_.magic) +
                      ", kind " + std::to_string(in_header_.kind) + "); the stream is corrupt");
  }
  have_header_ = true;
  return true;
}

Result<bool> TcpChannel::ReadStream0(Xfer& x, const Part& part) {
  size_t& off = recv_off_[0];
  bool progressed = false;
  while (off < part.end) {
    const size_t left = part.end - off;
    if (x.reduce == nullptr) {
      if (buffered() > 0) {
        const size_t n = std::min(left, buffered());
        std::memcpy(x.recv_data + off, in_.data() + in_pos_, n);
        in_pos_ += n;
        off += n;
        progressed = true;
        continue;
      }
      if (left >= kDirectReadBytes) {
        int err = 0;
        const ssize_t n = recv(fd(0), x.recv_data + off, left, MSG_DONTWAIT);
        switch (Classify(n, &err)) {
          case IoResult::kMoved:
            off += static_cast<size_t>(n);
            progressed = true;
            continue;
          case IoResult::kWouldBlock:
            if (err == EINTR) continue;
            return progressed;
          case IoResult::kClosed: return Closed("receiving");
          case IoResult::kError: return ErrnoError(Code::kSocketError, err, "recv() from " + Describe());
        }
      }
    } else {
      // Combine whole elements from the stream buffer.
      const size_t usable = std::min(left, buffered()) / x.elem_size * x.elem_size;
      if (usable > 0) {
        x.reduce(x.recv_data + off, x.operand + off, in_.data() + in_pos_, usable / x.elem_size);
        in_pos_ += usable;
        off += usable;
        progressed = true;
        continue;
      }
      if (in_pos_ > 0) {  // keep a partial element at the front, make room behind it
        std::memmove(in_.data(), in_.data() + in_pos_, buffered());
        in_end_ -= in_pos_;
        in_pos_ = 0;
      }
    }
    CHOIR_ASSIGN_OR_RETURN(bool got, Fill());
    if (!got) return progressed;
    progressed = true;
  }
  return progressed;
}

Result<bool> TcpChannel::ReadStream(Xfer& x, size_t k, const Part& part) {
  size_t& off = recv_off_[k];
  bool progressed = false;
  while (off < part.end) {
    const size_t left = part.end - off;
    int err = 0;
    if (x.reduce == nullptr) {
      const ssize_t n = recv(fd(k), x.recv_data + off, left, MSG_DONTWAIT);
      switch (Classify(n, &err)) {
        case IoResult::kMoved:
          off += static_cast<size_t>(n);
          progressed = true;
          continue;
        case IoResult::kWouldBlock:
          if (err == EINTR) continue;
          return progressed;
        case IoResult::kClosed: return Closed("receiving");
        case IoResult::kError: return ErrnoError(Code::kSocketError, err, "recv() from " + Describe());
      }
    }
    auto& stage = stage_[k];
    size_t& have = stage_len_[k];
    if (stage.empty()) stage.resize(chunk_bytes_);
    const size_t want = std::min(stage.size() - have, left - have);
    const ssize_t n = recv(fd(k), stage.data() + have, want, MSG_DONTWAIT);
    switch (Classify(n, &err)) {
      case IoResult::kMoved: break;
      case IoResult::kWouldBlock:
        if (err == EINTR) continue;
        return progressed;
      case IoResult::kClosed: return Closed("receiving");
      case IoResult::kError: return ErrnoError(Code::kSocketError, err, "recv() from " + Describe());
    }
    progressed = true;
    have += static_cast<size_t>(n);
    const size_t usable = have / x.elem_size * x.elem_size;
    if (usable > 0) {
      x.reduce(x.recv_data + off, x.operand + off, stage.data(), usable / x.elem_size);
      off += usable;
      std::memmove(stage.data(), stage.data() + usable, have - usable);
      have -= usable;
    }
  }
  return progressed;
}

Result<bool> TcpChannel::ReadPayload(Xfer& x) {
  const uint64_t length = in_header_.length;
  if (!recv_active_) {
    for (size_t k = 0; k < fds_.size(); ++k) recv_off_[k] = PartOf(length, k).begin;
    recv_active_ = true;
  }
  bool progressed = false;
  bool all_done = true;
  size_t done = 0;
  for (size_t k = 0; k < fds_.size(); ++k) {
    const Part part = PartOf(length, k);
    CHOIR_ASSIGN_OR_RETURN(bool moved, k == 0 ? ReadStream0(x, part) : ReadStream(x, k, part));
    progressed |= moved;
    all_done = all_done && recv_off_[k] == part.end;
    done += recv_off_[k] - part.begin;
  }
  x.done = done;
  if (all_done) {
    x.complete = true;
    have_header_ = false;
    recv_active_ = false;
    if (length == 0) progressed = true;
  }
  return progressed;
}

void TcpChannel::SendAbort(int code, const std::string& text) {
  if (aborted_.exchange(true)) return;
  if (!mid_message_) {
    MsgHeader h;
    h.kind = static_cast<uint32_t>(MsgKind::kAbort);
    h.sig = static_cast<uint64_t>(code);
    const std::string body = text.substr(0, 4000);
    h.length = body.size();
    iovec iov[2] = {{&h, sizeof(h)}, {const_cast<char*>(body.data()), body.size()}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    const ssize_t n = sendmsg(fd(0), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    CHOIR_LOG(Debug, TCP, "abort message to {}: {} of {} bytes", Describe(), n, sizeof(h) + body.size());
  }
  // The peer reads the abort message (if it fit) and then end-of-stream.
  for (const auto& f : fds_) shutdown(f.get(), SHUT_WR);
}

void TcpChannel::SendBye() {
  if (aborted_.exchange(true)) return;  // an abort message already said goodbye
  if (!mid_message_) {
    MsgHeader h;
    h.kind = static_cast<uint32_t>(MsgKind::kBye);
    const ssize_t n = send(fd(0), &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT);
    CHOIR_LOG(Debug, TCP, "bye to {}: {} of {} bytes", Describe(), n, sizeof(h));
  }
  for (const auto& f : fds_) {
    shutdown(f.get(), SHUT_WR);
    // Closing a socket with unread bytes sends a reset, and a reset makes the
    // peer's kernel drop what it has not read yet (our bye among it). Unread
    // bytes are of no use to a rank that leaves: discard them.
    uint8_t sink[4096];
    while (recv(f.get(), sink, sizeof(sink), MSG_DONTWAIT) > 0) {
    }
  }
}

}  // namespace choir::transport
