// Cost: 1 step; each rank writes what its peers need of its input to its
// shared slot once and reads what it needs straight from the peers' slots
// (n-1 cache-line hand-offs for tiny messages); its own block of an
// alltoall, reduce_scatter or scatter it takes from its input. For payloads
// up to CHOIR_SHM_SLOT_BYTES on one host.
//
// shm_flat: every rank publishes into its own slot of the host's shared area
// (local_ops.h) and computes its result from all slots. Reductions combine the
// ranks in rank order on every rank (float16/bfloat16 accumulate in float32
// and round once), so every rank gets bit-identical results. No rings, no
// per-message headers, no thread hand-off: this is the latency path.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/local_ops.h"
#include "algorithms/patterns/blocks.h"
#include "algorithms/switch_points.h"

namespace choir::algorithms {
namespace {

// Pointers to every rank's slot data, in rank order; no allocation for up to
// kInline ranks (the latency path).
class AllSlots {
 public:
  AllSlots(const AreaOp& op, size_t offset) {
    const size_t n = static_cast<size_t>(op.size());
    if (n > kInline) heap_.resize(n);
    for (size_t p = 0; p < n; ++p) slots()[p] = op.data(static_cast<int>(p)) + offset;
  }
  const void* const* data() { return slots(); }
  void Set(size_t p, const void* src) { slots()[p] = src; }

 private:
  const void** slots() { return heap_.empty() ? inline_.data() : heap_.data(); }
  static constexpr size_t kInline = 16;
  std::array<const void*, kInline> inline_;  // the first n set, the rest never read
  std::vector<const void*> heap_;
};

// Up to 32 bytes as two possibly overlapping fixed-size moves (loads
// first), inline: the payload of a tiny collective costs no call.
template <size_t kPiece>
void TwoPieces(uint8_t* d, const uint8_t* s, size_t bytes) {
  uint8_t head[kPiece], tail[kPiece];
  std::memcpy(head, s, kPiece);
  std::memcpy(tail, s + bytes - kPiece, kPiece);
  std::memcpy(d, head, kPiece);
  std::memcpy(d + bytes - kPiece, tail, kPiece);
}

void Copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  auto* dp = static_cast<uint8_t*>(dst);
  const auto* sp = static_cast<const uint8_t*>(src);
  if (d < s + bytes && s < d + bytes) {
    std::memmove(dst, src, bytes);  // overlapping: never a valid call's buffers, but harmless
  } else if (bytes <= 32) {
    if (bytes >= 16) {
      TwoPieces<16>(dp, sp, bytes);
    } else if (bytes >= 8) {
      TwoPieces<8>(dp, sp, bytes);
    } else if (bytes >= 4) {
      TwoPieces<4>(dp, sp, bytes);
    } else {
      for (size_t i = 0; i < bytes; ++i) dp[i] = sp[i];
    }
  } else {
    kernels::CopyBytes(dst, src, bytes, /*nontemporal=*/false);
  }
}

// Blocks [0, skip) and (skip, n) of `block` bytes each from src to dst at the
// same offsets: a rank's slot gets every block but its own, which no peer
// reads (the rank takes that block straight from its input).
void CopyAllBut(uint8_t* dst, const uint8_t* src, size_t block, size_t n, size_t skip) {
  Copy(dst, src, skip * block);
  Copy(dst + (skip + 1) * block, src + (skip + 1) * block, (n - skip - 1) * block);
}

// Where each rank's block lies in an allgather's output: computed on the fly
// for the uniform collective (the latency path allocates nothing), from the
// counts for allgatherv.
class BlockLayout {
 public:
  BlockLayout(const OpArgs& a, int n) {
    if (a.kind == CollKind::kAllgatherV) table_ = patterns::BlocksFromCounts(a.RecvCounts(n));
    uniform_ = a.count;
  }
  patterns::Block operator[](int p) const {
    const size_t i = static_cast<size_t>(p);
    return table_.empty() ? patterns::Block{i * uniform_, uniform_} : table_[i];
  }

 private:
  std::vector<patterns::Block> table_;
  size_t uniform_ = 0;
};

}  // namespace

// Payload each rank needs in its slot, or 0 when the collective has no flat form.
size_t FlatSlotBytes(const OpArgs& a, int n) {
  const size_t es = a.elem_size();
  const size_t nn = static_cast<size_t>(n);
  switch (a.kind) {
    case CollKind::kAllreduce:
    case CollKind::kReduce:
    case CollKind::kBroadcast:
    case CollKind::kAllgather:
    case CollKind::kGather:
      return a.count * es;
    case CollKind::kReduceScatter:
    case CollKind::kScatter:
    case CollKind::kAlltoall:
      return nn * a.count * es;
    case CollKind::kAllgatherV:
      return *std::max_element(a.recv_counts.begin(), a.recv_counts.end()) * es;
    case CollKind::kBarrier:
      return 0;
    default:
      return SIZE_MAX;
  }
}

namespace {

// Combines, in rank order like the slots, this rank's `own` input and the
// `bytes` every peer wrote from line `first_line` on (gathered into a local
// buffer first) into `out`, `count` elements, once every peer's lines came.
void ReduceFromLines(AreaOp& op, Context& c, const void* own, void* out, size_t count, size_t bytes,
                     size_t first_line) {
  const size_t n = static_cast<size_t>(op.size());
  const size_t stride = (bytes + 63) / 64 * 64;
  alignas(64) std::array<uint8_t, 4096> stack;
  std::vector<uint8_t> heap;
  uint8_t* gathered = stack.data();
  if (n * stride > stack.size()) {
    heap.resize(n * stride);
    gathered = heap.data();
  }
  AllSlots srcs(op, 0);
  for (size_t p = 0; p < n; ++p) {
    uint8_t* at = gathered + p * stride;
    if (static_cast<int>(p) == op.me()) {
      // The output may alias the first input only (ReduceMany): in place,
      // this rank's input is copied unless it is that one.
      if (own != out || p == 0) {
        srcs.Set(p, own);
        continue;
      }
      std::memcpy(at, own, bytes);
    } else {
      op.ReadLines(static_cast<int>(p), at, bytes, first_line);
    }
    srcs.Set(p, at);
  }
  kernels::ReduceMany(out, srcs.data(), op.size(), count, c.dtype(), c.op());
  FinishAverage(c, out, count);
}

// An allreduce through flagged lines (AreaOp::LinesFit).
Status AllreduceLines(AreaOp& op, Context& c, const OpArgs& a, size_t bytes) {
  op.PublishLines(a.send, bytes);
  CHOIR_RETURN_IF_ERROR(op.WaitLines(bytes));
  ReduceFromLines(op, c, a.send, a.recv, a.count, bytes, 0);
  op.FinishReads();
  return Status::Ok();
}

// Every rank publishes its input; the ranks that want the result (all of
// them for allreduce, the root for reduce) combine every slot.
Status ReduceSlots(Context& c, const OpArgs& a, bool want_result) {
  const size_t bytes = a.count * c.elem_size();
  const bool lines = a.kind == CollKind::kAllreduce && AreaOp::LinesFit(bytes) &&
                     bytes <= AllreduceLinesMaxBytes(c.HostSwitchTable(), c.local_group()->ranks_share_cpus);
  AreaOp op(c, lines ? AreaOp::LineLayoutBytes(bytes) : FlatSlotBytes(a, c.size()));
  CHOIR_RETURN_IF_ERROR(op.Acquire());
  // Lines for allreduce alone: in the one-directional streams of reduce and
  // broadcast a rank's own work per call paces the stream, not the wait,
  // and lines measured level or slower there (docs/performance-log.md,
  // "Flagged lines").
  if (lines) return AllreduceLines(op, c, a, bytes);
  // Nobody reads a reduce root's slot: it publishes its header alone (the
  // peers' signature checks) and combines its input where it is, unless
  // the call is in place (its output would then be an input it overwrites).
  const bool reduce_root = a.kind == CollKind::kReduce && want_result;
  const bool own_input = reduce_root && a.send != a.recv;
  if (!own_input) Copy(op.my_data(), a.send, bytes);
  op.Publish(own_input ? 0 : bytes, /*peers_read=*/!reduce_root);
  if (want_result) {
    CHOIR_RETURN_IF_ERROR(op.WaitAll());
    AllSlots srcs(op, 0);
    if (own_input) srcs.Set(static_cast<size_t>(op.me()), a.send);
    if (a.count > 0) kernels::ReduceMany(a.recv, srcs.data(), op.size(), a.count, c.dtype(), c.op());
    FinishAverage(c, a.recv, a.count);
  }
  op.FinishReads();
  return Status::Ok();
}

}  // namespace

Status AllreduceFlat(Context& c, const OpArgs& a) { return ReduceSlots(c, a, true); }

Status ReduceFlat(Context& c, const OpArgs& a) { return ReduceSlots(c, a, c.rank() == a.root); }

Status ReduceScatterFlat(Context& c, const OpArgs& a) {
  const size_t block = a.count * c.elem_size();
  const bool lines = AreaOp::BlockLinesFit(block, c.size()) && block <= ReduceScatterLinesMaxBlock(c.HostSwitchTable());
  AreaOp op(c, lines ? AreaOp::LineLayoutBytes(block, c.size()) : FlatSlotBytes(a, c.size()));
  const size_t n = static_cast<size_t>(op.size());
  const size_t me = static_cast<size_t>(c.rank());
  const auto* send = static_cast<const uint8_t*>(a.send);
  if (lines) {
    // Each rank's block of every peer in lines of its own (AreaOp::BlockLinesFit).
    CHOIR_RETURN_IF_ERROR(op.Acquire());
    const size_t first = me * AreaOp::LinesOf(block);
    op.PublishBlockLines(send, block, static_cast<int>(me));
    CHOIR_RETURN_IF_ERROR(op.WaitLines(block, first));
    ReduceFromLines(op, c, send + me * block, a.recv, a.count, block, first);
    op.FinishReads();
    return Status::Ok();
  }
  // In place (recv is this rank's block of send) the block goes through the
  // slot too: ReduceMany lets the output alias only its first input, and
  // this rank's block is input `rank`.
  const bool in_place = a.recv == send + me * block;
  CHOIR_RETURN_IF_ERROR(op.Acquire());
  if (in_place) {
    Copy(op.my_data(), send, block * n);
  } else {
    CopyAllBut(op.my_data(), send, block, n, me);
  }
  op.Publish(block * n);
  CHOIR_RETURN_IF_ERROR(op.WaitAll(/*reads=*/block));
  // Otherwise this rank's share of its own block comes from its input.
  AllSlots srcs(op, me * block);
  if (!in_place) srcs.Set(me, send + me * block);
  if (a.count > 0) kernels::ReduceMany(a.recv, srcs.data(), op.size(), a.count, c.dtype(), c.op());
  FinishAverage(c, a.recv, a.count);
  op.FinishReads();
  return Status::Ok();
}

Status BroadcastFlat(Context& c, const OpArgs& a) {
  AreaOp op(c, FlatSlotBytes(a, c.size()));
  const size_t bytes = a.count * c.elem_size();
  CHOIR_RETURN_IF_ERROR(op.Acquire());
  if (c.rank() == a.root) {
    Copy(op.my_data(), a.send, bytes);
    Copy(a.recv, a.send, bytes);
  }
  op.Publish(c.rank() == a.root ? bytes : 0);
  if (c.rank() != a.root) {
    CHOIR_RETURN_IF_ERROR(op.WaitFor(a.root));
    Copy(a.recv, op.data(a.root), bytes);
  }
  op.FinishReads();
  return Status::Ok();
}

Status AllgatherFlat(Context& c, const OpArgs& a) {
  const size_t es = c.elem_size();
  const size_t block = a.count * es;  // every rank's (not for AllgatherV)
  const bool lines = a.kind == CollKind::kAllgather && AreaOp::BlockLinesFit(block, 1);
  AreaOp op(c, lines ? AreaOp::LineLayoutBytes(block) : FlatSlotBytes(a, c.size()));
  const int n = op.size();
  const BlockLayout blocks(a, n);
  const patterns::Block own = blocks[c.rank()];
  CHOIR_RETURN_IF_ERROR(op.Acquire());
  auto* out = static_cast<uint8_t*>(a.recv);
  if (lines) {
    op.PublishLines(a.send, block);
    Copy(out + own.offset * es, a.send, block);  // while the peers publish
    CHOIR_RETURN_IF_ERROR(op.WaitLines(block));
    for (int p = 0; p < n; ++p) {
      if (p != c.rank()) op.ReadLines(p, out + blocks[p].offset * es, block);
    }
    op.FinishReads();
    return Status::Ok();
  }
  Copy(op.my_data(), a.send, own.count * es);
  op.Publish(own.count * es);
  Copy(out + own.offset * es, a.send, own.count * es);  // while the peers publish
  CHOIR_RETURN_IF_ERROR(op.WaitAll());
  for (int p = 0; p < n; ++p) {
    if (p == c.rank()) continue;
    const patterns::Block b = blocks[p];
    Copy(out + b.offset * es, op.data(p), b.count * es);
  }
  op.FinishReads();
  return Status::Ok();
}

Status GatherFlat(Context& c, const OpArgs& a) {
  AreaOp op(c, FlatSlotBytes(a, c.size()));
  const size_t block = a.count * c.elem_size();
  const bool root = c.rank() == a.root;
  CHOIR_RETURN_IF_ERROR(op.Acquire());
  if (!root) Copy(op.my_data(), a.send, block);  // nobody reads the root's slot
  op.Publish(root ? 0 : block);
  if (root) {
    CHOIR_RETURN_IF_ERROR(op.WaitAll());
    auto* out = static_cast<uint8_t*>(a.recv);
    for (int p = 0; p < op.size(); ++p) {
      Copy(out + static_cast<size_t>(p) * block, p == a.root ? a.send : op.data(p), block);
    }
  }
  op.FinishReads();
  return Status::Ok();
}

Status ScatterFlat(Context& c, const OpArgs& a) {
  AreaOp op(c, FlatSlotBytes(a, c.size()));
  const size_t block = a.count * c.elem_size();
  const bool root = c.rank() == a.root;
  CHOIR_RETURN_IF_ERROR(op.Acquire());
  if (root) {
    CopyAllBut(op.my_data(), static_cast<const uint8_t*>(a.send), block, static_cast<size_t>(op.size()),
               static_cast<size_t>(a.root));
  }
  op.Publish(root ? block * static_cast<size_t>(op.size()) : 0);
  if (root) {
    Copy(a.recv, static_cast<const uint8_t*>(a.send) + static_cast<size_t>(a.root) * block, block);
  } else {
    CHOIR_RETURN_IF_ERROR(op.WaitFor(a.root, /*reads=*/block));
    Copy(a.recv, op.data(a.root) + static_cast<size_t>(c.rank()) * block, block);
  }
  op.FinishReads();
  return Status::Ok();
}

// Uniform alltoall only (alltoallv never goes flat: FlatUsable). Block p of
// every slot is for rank p, at p * count, so a rank reads its block from each
// slot directly; equal counts are part of the signature WaitAll checks.
Status AlltoallFlat(Context& c, const OpArgs& a) {
  const size_t block = a.count * c.elem_size();
  AreaOp op(c, FlatSlotBytes(a, c.size()));
  const size_t n = static_cast<size_t>(op.size());
  const size_t mine = static_cast<size_t>(c.rank()) * block;
  const auto* send = static_cast<const uint8_t*>(a.send);
  CHOIR_RETURN_IF_ERROR(op.Acquire());
  CopyAllBut(op.my_data(), send, block, n, static_cast<size_t>(c.rank()));
  op.Publish(n * block);
  auto* out = static_cast<uint8_t*>(a.recv);
  Copy(out + mine, send + mine, block);  // while the peers publish
  CHOIR_RETURN_IF_ERROR(op.WaitAll(/*reads=*/block));
  for (size_t p = 0; p < n; ++p) {
    if (p != static_cast<size_t>(c.rank())) Copy(out + p * block, op.data(static_cast<int>(p)) + mine, block);
  }
  op.FinishReads();
  return Status::Ok();
}

Status BarrierFlat(Context& c, const OpArgs& a) {
  AreaOp op(c, FlatSlotBytes(a, c.size()));
  CHOIR_RETURN_IF_ERROR(op.Acquire());
  op.Publish(0);
  CHOIR_RETURN_IF_ERROR(op.WaitAll());
  op.FinishReads();
  return Status::Ok();
}

bool FlatUsable(const GroupView& g, const OpArgs& a) {
  // Every rank must reach the same verdict: alltoallv's payload depends on
  // this rank's own send counts, which peers do not know, so it never goes flat.
  if (!g.same_host || a.kind == CollKind::kAlltoallV) return false;
  // Whether the slots are preferred for this payload: switch_points.cc.
  return FlatSlotBytes(a, g.size) <= g.slot_bytes;
}

}  // namespace choir::algorithms
