// TCP channel: one non-blocking socket to a peer on any host.
//
// Sends use sendmsg() with the header and payload in one call. Receives go
// through a stream buffer so that a small message (header + payload) costs one
// recv(); large payloads are read straight into the destination, and
// receive-and-reduce reads into the buffer in chunks and combines whole
// elements from there.
//
// Thread-safety: see Channel.
#ifndef CHOIR_TRANSPORT_TCP_TCP_CHANNEL_H_
#define CHOIR_TRANSPORT_TCP_TCP_CHANNEL_H_

#include <atomic>
#include <string>
#include <vector>

#include "base/fd.h"
#include "transport/channel.h"

namespace choir::transport {

class TcpChannel final : public Channel {
 public:
  // `fd` is a connected socket that finished the handshake.
  TcpChannel(Fd fd, int peer, std::string address, size_t chunk_bytes);
  ~TcpChannel() override;

  TransportKind kind() const override { return TransportKind::kTcp; }
  int peer() const override { return peer_; }
  std::string Describe() const override;

  Result<bool> AdvanceSend(Xfer& x) override;
  Result<bool> PollHeader() override;
  const MsgHeader& incoming() const override { return in_header_; }
  Result<bool> ReadPayload(Xfer& x) override;

  int poll_fd() const override { return fd_.get(); }
  void SendAbort(int code, const std::string& text) override;

 private:
  // Reads what the socket has into the stream buffer; false when nothing came.
  Result<bool> Fill();
  Status Closed(const char* while_doing) const;
  size_t buffered() const { return in_end_ - in_pos_; }

  Fd fd_;
  const int peer_;
  const std::string address_;

  // Sending.
  size_t header_sent_ = 0;     // bytes of the current header already sent
  bool mid_message_ = false;   // a message is partly on the wire
  std::atomic<bool> aborted_{false};

  // Receiving.
  std::vector<uint8_t> in_;
  size_t in_pos_ = 0;
  size_t in_end_ = 0;
  bool have_header_ = false;
  MsgHeader in_header_;
};

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_TCP_TCP_CHANNEL_H_
