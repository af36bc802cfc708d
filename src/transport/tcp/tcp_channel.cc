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
}  // namespace

TcpChannel::TcpChannel(Fd fd, int peer, std::string address, size_t chunk_bytes)
    : fd_(std::move(fd)), peer_(peer), address_(std::move(address)) {
  in_.resize(std::max<size_t>(chunk_bytes, 64 * 1024));
}

TcpChannel::~TcpChannel() = default;

std::string TcpChannel::Describe() const {
  return "rank " + std::to_string(peer_) + " (tcp " + address_ + ")";
}

Status TcpChannel::Closed(const char* while_doing) const {
  return Status(Code::kPeerLost, Describe() + " closed the connection while this rank was " +
                                     while_doing + "; the peer process probably exited or crashed");
}

Result<bool> TcpChannel::AdvanceSend(Xfer& x) {
  if (aborted_.load(std::memory_order_relaxed)) {
    return Status(Code::kAborted, "the connection to " + Describe() + " was shut down by Abort()");
  }
  bool progressed = false;
  while (!x.complete) {
    iovec iov[2];
    int n_iov = 0;
    if (!x.header_done) {
      iov[n_iov++] = {reinterpret_cast<uint8_t*>(&x.header) + header_sent_,
                      sizeof(MsgHeader) - header_sent_};
    }
    const size_t left = x.header.length - x.done;
    if (left > 0) iov[n_iov++] = {const_cast<uint8_t*>(x.send_data) + x.done, left};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n_iov);
    const ssize_t n = sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return progressed;
      if (errno == EPIPE || errno == ECONNRESET) return Closed("sending");
      return ErrnoError(Code::kSocketError, errno, "send() to " + Describe());
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
    x.done += sent;
    if (x.header_done && x.done == x.header.length) {
      x.complete = true;
      mid_message_ = false;
    }
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
  while (true) {
    const ssize_t n = recv(fd_.get(), in_.data() + in_end_, in_.size() - in_end_, MSG_DONTWAIT);
    if (n > 0) {
      in_end_ += static_cast<size_t>(n);
      return true;
    }
    if (n == 0) return Closed("receiving");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    if (errno == ECONNRESET) return Closed("receiving");
    return ErrnoError(Code::kSocketError, errno, "recv() from " + Describe());
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
  if (in_header_.magic != kMessageMagic || in_header_.kind < 1 || in_header_.kind > 3) {
    return Status(Code::kProtocolError,
                  "bad message header from " + Describe() + " (magic " +
                      std::to_string(in_header_.magic) + ", kind " +
                      std::to_string(in_header_.kind) + "); the stream is corrupt");
  }
  have_header_ = true;
  return true;
}

Result<bool> TcpChannel::ReadPayload(Xfer& x) {
  const size_t total = in_header_.length;
  bool progressed = false;
  while (x.done < total) {
    const size_t left = total - x.done;
    if (x.reduce == nullptr) {
      if (buffered() > 0) {
        const size_t n = std::min(left, buffered());
        std::memcpy(x.recv_data + x.done, in_.data() + in_pos_, n);
        in_pos_ += n;
        x.done += n;
        progressed = true;
        continue;
      }
      if (left >= kDirectReadBytes) {
        const ssize_t n = recv(fd_.get(), x.recv_data + x.done, left, MSG_DONTWAIT);
        if (n > 0) {
          x.done += static_cast<size_t>(n);
          progressed = true;
          continue;
        }
        if (n == 0) return Closed("receiving");
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == ECONNRESET) return Closed("receiving");
        return ErrnoError(Code::kSocketError, errno, "recv() from " + Describe());
      }
    } else {
      // Combine whole elements from the stream buffer.
      const size_t usable = std::min(left, buffered()) / x.elem_size * x.elem_size;
      if (usable > 0) {
        x.reduce(x.recv_data + x.done, x.operand + x.done, in_.data() + in_pos_,
                 usable / x.elem_size);
        in_pos_ += usable;
        x.done += usable;
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
    if (!got) break;
    progressed = true;
  }
  if (x.done == total) {
    x.complete = true;
    have_header_ = false;
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
    const ssize_t n = sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    CHOIR_LOG(Debug, TCP, "abort message to {}: {} of {} bytes", Describe(), n,
              sizeof(h) + body.size());
  }
  // The peer reads the abort message (if it fit) and then end-of-stream.
  shutdown(fd_.get(), SHUT_WR);
}

}  // namespace choir::transport
