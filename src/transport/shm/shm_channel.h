// Shared-memory channel between two ranks on one host.
//
// This rank writes into its slot of the peer's segment and reads from the
// peer's slot of its own segment, so every ring has one producer and one
// consumer and lives in the memory of its reader. The producer copies the
// payload in; the consumer copies it out or combines it straight from the
// ring into the destination (no staging copy). After publishing, either side
// rings the other's doorbell only if the other is asleep.
//
// Liveness: a pidfd of the peer process tells when it has exited.
//
// Thread-safety: see Channel.
#ifndef CHOIR_TRANSPORT_SHM_SHM_CHANNEL_H_
#define CHOIR_TRANSPORT_SHM_SHM_CHANNEL_H_

#include <memory>
#include <string>

#include "base/fd.h"
#include "transport/channel.h"
#include "transport/shm/segment.h"

namespace choir::transport {

class ShmChannel final : public Channel {
 public:
  // own: this rank's segment; peer_segment: the peer's, shared by all channels
  // of this endpoint. my_slot / peer_slot: local indices.
  ShmChannel(int peer, int peer_pid, Segment* own, Segment* peer_segment, int my_slot,
             int peer_slot);

  TransportKind kind() const override { return TransportKind::kShm; }
  int peer() const override { return peer_; }
  std::string Describe() const override;

  Result<bool> AdvanceSend(Xfer& x) override;
  Result<bool> PollHeader() override;
  const MsgHeader& incoming() const override { return in_header_; }
  Result<bool> ReadPayload(Xfer& x) override;

  Status CheckAlive() override;
  void SendAbort(int code, const std::string& text) override;
  Status RemoteAbort() override;
  void SendBye() override;
  bool Departed() const override;

 private:
  const int peer_;
  const int peer_pid_;
  Fd pidfd_;
  Segment* own_;
  Segment* peer_seg_;
  // Outbound: our slot in the peer's segment.
  RingCtl* out_;
  uint8_t* out_data_;
  uint64_t out_head_ = 0;
  uint64_t out_tail_cache_ = 0;
  // Inbound: the peer's slot in our segment.
  RingCtl* in_;
  uint8_t* in_data_;
  uint64_t in_tail_ = 0;
  const uint64_t cap_;
  bool have_header_ = false;
  MsgHeader in_header_;
};

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_SHM_SHM_CHANNEL_H_
