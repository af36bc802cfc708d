// One posted send or receive between this rank and a peer.
//
// Algorithms describe each step as a handful of Xfers and hand them to
// Endpoint::Run, which drives all of them at once (so a rank can send to its
// right neighbour while receiving from its left one) until every Xfer is
// complete, an error occurs, or the deadline passes.
//
// Thread-safety: owned by the one thread running the operation.
#ifndef CHOIR_TRANSPORT_XFER_H_
#define CHOIR_TRANSPORT_XFER_H_

#include <cstddef>
#include <cstdint>

#include "kernels/reduce.h"
#include "transport/message.h"

namespace choir::transport {

struct Xfer {
  enum class Dir : uint8_t { kSend, kRecv };

  static Xfer Send(int peer, const MsgHeader& header, const void* data) {
    Xfer x;
    x.dir = Dir::kSend;
    x.peer = peer;
    x.header = header;
    x.send_data = static_cast<const uint8_t*>(data);
    return x;
  }
  // `header` is what the receiver expects (kind, seq, signature, length).
  static Xfer Recv(int peer, const MsgHeader& header, void* data) {
    Xfer x;
    x.dir = Dir::kRecv;
    x.peer = peer;
    x.header = header;
    x.recv_data = static_cast<uint8_t*>(data);
    return x;
  }
  // Receive and combine: recv_data[i] = operand[i] op incoming[i]. `operand`
  // defaults to recv_data itself (accumulate in place).
  static Xfer RecvReduce(int peer, const MsgHeader& header, void* data, kernels::ReduceFn fn,
                         size_t elem_size, const void* operand = nullptr) {
    Xfer x = Recv(peer, header, data);
    x.reduce = fn;
    x.elem_size = elem_size;
    x.operand = operand ? static_cast<const uint8_t*>(operand) : x.recv_data;
    return x;
  }

  Dir dir = Dir::kSend;
  int peer = -1;  // communicator rank; -1 for a receive from any source (P2P only)
  MsgHeader header;
  const uint8_t* send_data = nullptr;
  uint8_t* recv_data = nullptr;
  kernels::ReduceFn reduce = nullptr;
  const uint8_t* operand = nullptr;  // left operand of `reduce`
  size_t elem_size = 1;

  // Progress, maintained by the channel.
  bool header_done = false;
  size_t done = 0;  // payload bytes moved
  bool complete = false;
  int matched_peer = -1;       // for any-source receives
  uint64_t matched_length = 0; // P2P receives may get fewer bytes than the buffer holds
};

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_XFER_H_
