// The first bytes on every TCP link between two ranks.
//
// The connecting rank (the higher one) sends a Hello; the accepting rank
// checks protocol version, job and communicator and answers with a Reply that
// either accepts (code 0) or refuses with a numbered error and its reason.
// A peer of another version or job is refused, never half-connected.
// Wire format: docs/protocols.md, "Peer handshake". The `auth` field is
// reserved for the shared-secret challenge (all zeros until it exists).
//
// Thread-safety: plain data and pure functions.
#ifndef CHOIR_TRANSPORT_TCP_HANDSHAKE_H_
#define CHOIR_TRANSPORT_TCP_HANDSHAKE_H_

#include <cstdint>
#include <string>

#include "base/clock.h"
#include "choir/status.h"

namespace choir::transport {

inline constexpr uint32_t kHandshakeMagic = 0x53484843;  // "CHHS"

struct HandshakeHello {
  uint32_t magic = kHandshakeMagic;
  uint32_t protocol = 0;
  uint64_t job_hash = 0;
  uint64_t comm_hash = 0;
  int32_t from_rank = -1;
  int32_t to_rank = -1;
  int32_t stream = 0;   // index of this connection among the pair's streams
  int32_t streams = 1;  // CHOIR_TCP_STREAMS of the connecting rank
  uint8_t auth[32] = {0};
  char job[48] = {0};    // for messages only (truncated)
  char comm[64] = {0};   // for messages only (truncated)
};
static_assert(sizeof(HandshakeHello) == 184);

struct HandshakeReply {
  uint32_t magic = kHandshakeMagic;
  int32_t code = 0;       // 0 accepted, else a choir error number
  char text[248] = {0};
};
static_assert(sizeof(HandshakeReply) == 256);

void CopyTruncated(char* dst, size_t cap, const std::string& src);

// Sends a hello on a connected blocking-or-not socket.
Status SendHello(int fd, const HandshakeHello& hello, Deadline deadline);
// Reads and checks a hello against this rank's identity; on refusal sends the
// reply and returns the error. `from_rank` is set on success.
Status AcceptHello(int fd, const HandshakeHello& expected, int* from_rank, int* stream, Deadline deadline);
// Reads the acceptor's reply; its refusal becomes this side's error.
Status ReadReply(int fd, int peer_rank, const std::string& address, Deadline deadline);

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_TCP_HANDSHAKE_H_
