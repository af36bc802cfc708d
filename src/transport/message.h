// The header in front of every message between two ranks, on every transport.
//
// Wire format (docs/protocols.md, "Peer messages"): 48 bytes in the sender's
// native byte order (choir only links hosts of one architecture; the peer
// handshake checks the magic to catch a byte-order mismatch).
//
// A collective message carries the collective's sequence number and
// signature, so that the receiver can tell when ranks run different
// collectives (CollectiveMismatch) instead of mixing up their bytes.
//
// Thread-safety: plain data.
#ifndef CHOIR_TRANSPORT_MESSAGE_H_
#define CHOIR_TRANSPORT_MESSAGE_H_

#include <cstdint>

namespace choir::transport {

inline constexpr uint32_t kMessageMagic = 0x31524843;  // "CHR1"

enum class MsgKind : uint32_t {
  kCollective = 1,  // seq = collective sequence number
  kP2P = 2,         // seq = user tag
  kAbort = 3,       // payload = text of the sender's error; `sig` = its error code
  kBye = 4,         // the sender destroyed its communicator cleanly; nothing follows
};
inline bool IsValidKind(uint32_t kind) { return kind >= 1 && kind <= static_cast<uint32_t>(MsgKind::kBye); }

struct MsgHeader {
  uint32_t magic = kMessageMagic;
  uint32_t kind = 0;
  uint64_t seq = 0;
  uint64_t sig = 0;     // packed signature: collective, dtype, reduce op, root
  uint64_t count = 0;   // element count of the collective (signature part)
  uint64_t length = 0;  // payload bytes that follow
  uint64_t aux = 0;     // collective: step index within the algorithm (diagnostics)
};
static_assert(sizeof(MsgHeader) == 48);

// Same collective step: everything but `length` (checked separately) and `aux`.
inline bool SameSignature(const MsgHeader& a, const MsgHeader& b) {
  return a.kind == b.kind && a.seq == b.seq && a.sig == b.sig && a.count == b.count;
}

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_MESSAGE_H_
