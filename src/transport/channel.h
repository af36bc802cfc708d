// A Channel moves messages between this rank and one peer, in both
// directions, without ever blocking: every call does what it can right now
// and reports whether anything moved. Endpoint (endpoint.h) drives many
// channels at once and decides when to sleep.
//
// One folder per transport implements this same interface: shm/ (rings in
// shared memory, same host) and tcp/ (one socket, any host).
//
// Thread-safety: a channel is used by one thread at a time (the thread
// running the communicator's current operation); SendAbort may be called
// from another thread.
#ifndef CHOIR_TRANSPORT_CHANNEL_H_
#define CHOIR_TRANSPORT_CHANNEL_H_

#include <string>
#include <vector>

#include "choir/status.h"
#include "transport/message.h"
#include "transport/xfer.h"

namespace choir::transport {

enum class TransportKind { kShm, kTcp };
inline const char* TransportName(TransportKind k) { return k == TransportKind::kShm ? "shm" : "tcp"; }

class Channel {
 public:
  virtual ~Channel() = default;

  virtual TransportKind kind() const = 0;
  virtual int peer() const = 0;
  // "rank 3 (tcp 10.0.0.2:4100)" / "rank 1 (shm, pid 4242)": used in every error.
  virtual std::string Describe() const = 0;

  // Sends x.header then x.send_data[0, x.header.length) as far as possible.
  // Messages go out one at a time in the order the caller advances them.
  virtual Result<bool> AdvanceSend(Xfer& x) = 0;

  // Makes the next incoming header visible through incoming() if its bytes have
  // arrived. Returns whether a header is available.
  virtual Result<bool> PollHeader() = 0;
  virtual const MsgHeader& incoming() const = 0;
  // Moves payload of the incoming message into x.recv_data (copying, or
  // combining with x.reduce). When the payload is complete, x.complete is set
  // and the next PollHeader reads the following message.
  virtual Result<bool> ReadPayload(Xfer& x) = 0;

  // For the endpoint's waiting logic: TCP returns its sockets, shm none.
  virtual std::vector<int> poll_fds() const { return {}; }
  // Shm: whether the peer process is still alive (cheap; called while idle).
  virtual Status CheckAlive() { return Status::Ok(); }

  // Best effort, never blocks: tells the peer that this rank failed with
  // `code`/`text`. After this the channel carries nothing more.
  virtual void SendAbort(int code, const std::string& text) = 0;
  // Best effort, never blocks: tells the peer that this rank leaves cleanly
  // (its communicator is being destroyed), so that a peer still finishing the
  // last collective does not mistake the closed connection for a crash.
  virtual void SendBye() {}
  // Whether the peer's bye was seen on a side path (shm: its segment says so).
  virtual bool Departed() const { return false; }
  // A failure the peer announced on a side path (shm abort record), or OK.
  virtual Status RemoteAbort() { return Status::Ok(); }
};

// Shared by channels: the status a received abort message turns into.
Status RemoteFailure(const Channel& ch, int code, const std::string& text);
// True for statuses made by RemoteFailure (a peer's error, not this rank's).
bool IsRemoteFailure(const Status& status);

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_CHANNEL_H_
