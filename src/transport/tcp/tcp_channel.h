// TCP channel: one or more non-blocking sockets ("streams") to a peer on any
// host.
//
// Headers and small payloads travel on stream 0, through a stream buffer so
// that a small message (header + payload) costs one recv(). Payloads of at
// least CHOIR_TCP_STRIPE_BYTES are cut into one part per stream, at 64-byte
// boundaries both sides compute from the length, and the parts move in
// parallel: one stream often cannot fill a fast link. Large parts are read
// straight into the destination; receive-and-reduce reads into a staging
// buffer in chunks and combines whole elements from there.
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
  // `fds` are connected sockets (stream 0 first) that finished the handshake.
  TcpChannel(std::vector<Fd> fds, int peer, std::string address, size_t chunk_bytes,
             size_t stripe_bytes);
  ~TcpChannel() override;

  TransportKind kind() const override { return TransportKind::kTcp; }
  int peer() const override { return peer_; }
  std::string Describe() const override;

  Result<bool> AdvanceSend(Xfer& x) override;
  Result<bool> PollHeader() override;
  const MsgHeader& incoming() const override { return in_header_; }
  Result<bool> ReadPayload(Xfer& x) override;

  std::vector<int> poll_fds() const override;
  void SendAbort(int code, const std::string& text) override;
  void SendBye() override;

 private:
  struct Part {
    size_t begin = 0;
    size_t end = 0;
  };
  // Part of a `length`-byte payload carried by stream k.
  Part PartOf(uint64_t length, size_t k) const;
  // Reads what stream 0 has into the stream buffer; false when nothing came.
  Result<bool> Fill();
  Result<bool> ReadStream0(Xfer& x, const Part& part);
  Result<bool> ReadStream(Xfer& x, size_t k, const Part& part);
  Result<bool> SendStream0(Xfer& x, const Part& part);
  Result<bool> SendStream(Xfer& x, size_t k, const Part& part);
  Status Closed(const char* while_doing) const;
  size_t buffered() const { return in_end_ - in_pos_; }
  int fd(size_t k) const { return fds_[k].get(); }

  std::vector<Fd> fds_;
  const int peer_;
  const std::string address_;
  const size_t stripe_bytes_;

  // Sending: offsets reached in the current message, per stream.
  size_t header_sent_ = 0;
  bool send_active_ = false;
  std::vector<size_t> send_off_;
  std::atomic<bool> mid_message_{false};
  std::atomic<bool> aborted_{false};

  // Receiving.
  std::vector<uint8_t> in_;  // stream 0's buffer
  size_t in_pos_ = 0;
  size_t in_end_ = 0;
  bool have_header_ = false;
  MsgHeader in_header_;
  bool recv_active_ = false;
  std::vector<size_t> recv_off_;
  std::vector<std::vector<uint8_t>> stage_;  // per stream > 0, for receive-and-reduce
  std::vector<size_t> stage_len_;
  const size_t chunk_bytes_;
};

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_TCP_TCP_CHANNEL_H_
