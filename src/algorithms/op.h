// What one operation asks for: the collective, its buffers and its signature.
//
// The signature (collective, dtype, count, root, reduce op) travels in every
// message header so that ranks that disagree are told so (CollectiveMismatch)
// instead of exchanging the wrong bytes.
//
// Thread-safety: plain data.
#ifndef CHOIR_ALGORITHMS_OP_H_
#define CHOIR_ALGORITHMS_OP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "choir/types.h"

namespace choir::algorithms {

enum class CollKind : uint8_t {
  kAllreduce = 1,
  kReduceScatter = 2,
  kAllgather = 3,
  kAllgatherV = 4,
  kBroadcast = 5,
  kReduce = 6,
  kGather = 7,
  kScatter = 8,
  kAlltoall = 9,
  kAlltoallV = 10,
  kBarrier = 11,
  kSend = 12,
  kRecv = 13,
  kSignatureCheck = 14,  // CHOIR_MISMATCH_CHECK=full: exchange of signatures
};
inline constexpr int kNumCollKinds = 15;

const char* CollKindName(CollKind kind);  // "allreduce", "reduce_scatter", ...
bool ParseCollKind(const std::string& name, CollKind* kind);

// Whether `kind` has a root: broadcast, reduce, gather and scatter.
constexpr bool IsRooted(CollKind kind) {
  return kind == CollKind::kBroadcast || kind == CollKind::kReduce || kind == CollKind::kGather ||
         kind == CollKind::kScatter;
}

struct OpArgs {
  CollKind kind = CollKind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // see each collective in communicator.h
  DataType dtype = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;   // broadcast/reduce/gather/scatter
  int peer = 0;   // send/recv (-1: any source)
  int tag = 0;    // send/recv
  std::vector<size_t> send_counts;  // alltoallv
  std::vector<size_t> recv_counts;  // allgatherv, alltoallv

  size_t elem_size() const { return DataTypeSize(dtype); }
  bool reduces() const {
    return kind == CollKind::kAllreduce || kind == CollKind::kReduceScatter ||
           kind == CollKind::kReduce;
  }
  // Elements this rank sends to / receives from each of `world` ranks for the
  // block collectives: the equal `count` of allgather/alltoall repeated, or
  // the v-variants' own counts.
  std::vector<size_t> SendCounts(int world) const;
  std::vector<size_t> RecvCounts(int world) const;
  // Bytes that characterize the size of the operation for algorithm selection
  // and for `choir perf` (nccl-tests convention: the largest buffer).
  size_t SelectionBytes(int world) const;
};

struct Signature {
  CollKind kind = CollKind::kBarrier;
  DataType dtype = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  int32_t root = 0;
  uint64_t count = 0;

  static Signature Of(const OpArgs& args);
  uint64_t PackedWord() const;
  static Signature Unpack(uint64_t word, uint64_t count);
  // "allreduce(float32 x 1024, sum)", "broadcast(int8 x 7, root 2)".
  std::string ToString() const;
  friend bool operator==(const Signature&, const Signature&) = default;
};

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_OP_H_
