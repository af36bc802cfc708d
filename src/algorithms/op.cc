#include "algorithms/op.h"

#include <fmt/format.h>

#include <numeric>

namespace choir::algorithms {

const char* CollKindName(CollKind kind) {
  switch (kind) {
    case CollKind::kAllreduce: return "allreduce";
    case CollKind::kReduceScatter: return "reduce_scatter";
    case CollKind::kAllgather: return "allgather";
    case CollKind::kAllgatherV: return "allgatherv";
    case CollKind::kBroadcast: return "broadcast";
    case CollKind::kReduce: return "reduce";
    case CollKind::kGather: return "gather";
    case CollKind::kScatter: return "scatter";
    case CollKind::kAlltoall: return "alltoall";
    case CollKind::kAlltoallV: return "alltoallv";
    case CollKind::kBarrier: return "barrier";
    case CollKind::kSend: return "send";
    case CollKind::kRecv: return "recv";
    case CollKind::kSignatureCheck: return "signature_check";
  }
  return "unknown";
}

bool ParseCollKind(const std::string& name, CollKind* kind) {
  for (int i = 1; i < kNumCollKinds; ++i) {
    const auto k = static_cast<CollKind>(i);
    if (name == CollKindName(k)) {
      *kind = k;
      return true;
    }
  }
  if (name == "bcast") {
    *kind = CollKind::kBroadcast;
    return true;
  }
  return false;
}

std::vector<size_t> OpArgs::SendCounts(int world) const {
  if (kind == CollKind::kAlltoall) return std::vector<size_t>(static_cast<size_t>(world), count);
  return send_counts;
}

std::vector<size_t> OpArgs::RecvCounts(int world) const {
  if (kind == CollKind::kAlltoall || kind == CollKind::kAllgather) {
    return std::vector<size_t>(static_cast<size_t>(world), count);
  }
  return recv_counts;
}

size_t OpArgs::SelectionBytes(int world) const {
  const size_t es = elem_size();
  const size_t n = static_cast<size_t>(world);
  switch (kind) {
    case CollKind::kReduceScatter:
    case CollKind::kAllgather:
    case CollKind::kGather:
    case CollKind::kScatter:
    case CollKind::kAlltoall:
      return count * n * es;
    case CollKind::kAllgatherV:
      return std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0}) * es;
    case CollKind::kAlltoallV:
      return std::max(std::accumulate(send_counts.begin(), send_counts.end(), size_t{0}),
                      std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0})) * es;
    default:
      return count * es;
  }
}

Signature Signature::Of(const OpArgs& args) {
  Signature s;
  s.kind = args.kind;
  s.dtype = args.dtype;
  s.op = args.reduces() ? args.op : ReduceOp::kSum;
  s.root = IsRooted(args.kind) ? args.root : 0;
  switch (args.kind) {
    case CollKind::kAllgatherV:
      s.count = std::accumulate(args.recv_counts.begin(), args.recv_counts.end(), uint64_t{0});
      break;
    case CollKind::kAlltoallV:  // per-peer lengths are checked message by message
    case CollKind::kBarrier:
      s.count = 0;
      break;
    default:
      s.count = args.count;
  }
  return s;
}

uint64_t Signature::PackedWord() const {
  return static_cast<uint64_t>(kind) | (static_cast<uint64_t>(dtype) << 8) |
         (static_cast<uint64_t>(op) << 16) | (static_cast<uint64_t>(static_cast<uint32_t>(root)) << 32);
}

Signature Signature::Unpack(uint64_t word, uint64_t count) {
  Signature s;
  s.kind = static_cast<CollKind>(word & 0xff);
  s.dtype = static_cast<DataType>((word >> 8) & 0xff);
  s.op = static_cast<ReduceOp>((word >> 16) & 0xff);
  s.root = static_cast<int32_t>(static_cast<uint32_t>(word >> 32));
  s.count = count;
  return s;
}

std::string Signature::ToString() const {
  std::string out = fmt::format("{}({} x {}", CollKindName(kind), DataTypeName(dtype), count);
  if (kind == CollKind::kAllreduce || kind == CollKind::kReduceScatter || kind == CollKind::kReduce) {
    out += fmt::format(", {}", ReduceOpName(op));
  }
  if (IsRooted(kind)) {
    out += fmt::format(", root {}", root);
  }
  return out + ")";
}

}  // namespace choir::algorithms
