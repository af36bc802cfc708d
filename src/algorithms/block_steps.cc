#include "algorithms/block_steps.h"

#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/local_ops.h"
#include "algorithms/switch_points.h"
#include "kernels/reduce.h"
#include "algorithms/patterns/ring.h"

namespace choir::algorithms {

namespace {
bool PipeCarries(const Context& c, const Blocks& blocks) {
  size_t largest = 0;
  for (const auto& b : blocks) largest = std::max(largest, b.count);
  return PipeFits(c.local_group()->mine().pipe_bytes(), c.local_group()->pipe_cache_bytes, c.size(), c.elem_size(),
                  largest);
}

// Whether the pipe goes before cma for these blocks: where the host's
// switch-point table puts it for a whole collective of this kind and size
// (switch_points.cc), or whenever it carries them without cma.
bool PipeFirst(const Context& c, CollKind kind, const Blocks& blocks) {
  if (!PipeCarries(c, blocks)) return false;
  const GroupView v = c.View();
  if (!v.cma) return true;
  size_t total = 0;
  for (const auto& b : blocks) total += b.count;
  return static_cast<uint64_t>(total) * c.elem_size() >=
         SameHostOrderFor(v.switch_table, kind, v.cma, v.shares_cpus).pipe_min;
}
}  // namespace

Blocks EvenBlocks(size_t count, int parts) {
  Blocks blocks;
  for (int i = 0; i < parts; ++i) blocks.push_back(patterns::EvenBlock(count, parts, i));
  return blocks;
}

// Cost: n-1 steps; each rank sends and receives the sum of the other blocks.
// Partial sums travel to the right and grow by one contribution per hop;
// the last hop lands in `my_out`, combined with the rank's own input.
Status RingReduceScatterBlocks(Context& c, const uint8_t* in, uint8_t* my_out, const Blocks& blocks) {
  const int n = c.size();
  const size_t es = c.elem_size();
  const auto& mine = blocks[static_cast<size_t>(c.rank())];
  if (n == 1) {
    CopyIfDistinct(my_out, in + mine.offset * es, mine.count * es);
    return Status::Ok();
  }
  size_t largest = 0;
  for (const auto& b : blocks) largest = std::max(largest, b.count * es);
  CHOIR_ASSIGN_OR_RETURN(uint8_t* scratch, c.ScratchBytes(2 * largest));
  uint8_t* bufs[2] = {scratch, scratch + largest};
  const patterns::Ring ring{c.rank(), n};
  for (int s = 0; s < ring.Steps(); ++s) {
    const auto& sb = blocks[static_cast<size_t>(ring.ReduceScatterSendBlock(s))];
    const auto& rb = blocks[static_cast<size_t>(ring.ReduceScatterRecvBlock(s))];
    const uint8_t* src = s == 0 ? in + sb.offset * es : bufs[(s - 1) % 2];
    uint8_t* dst = s == ring.Steps() - 1 ? my_out : bufs[s % 2];
    CHOIR_RETURN_IF_ERROR(c.Run({c.Send(ring.Right(), src, sb.count * es),
                                 c.RecvReduce(ring.Left(), dst, rb.count * es, in + rb.offset * es)}));
  }
  return Status::Ok();
}

// Cost: 1 step; each rank reads its block of every peer's input once.
Status CmaReduceScatterBlocks(Context& c, const uint8_t* in, uint8_t* my_out, const Blocks& blocks) {
  AreaOp op(c);
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, in, my_out));
  return CmaReduceWith(op, in, my_out, blocks, /*gather=*/false, /*average=*/false);
}

Status ReduceScatterBlocks(Context& c, const uint8_t* in, uint8_t* my_out, const Blocks& blocks) {
  if (LocalGroupUsable(c)) {
    if (PipeFirst(c, CollKind::kReduceScatter, blocks)) return PipeReduceScatterBlocks(c, in, my_out, blocks);
    if (c.local_group()->cma) return CmaReduceScatterBlocks(c, in, my_out, blocks);
  }
  return RingReduceScatterBlocks(c, in, my_out, blocks);
}

// Cost: n-1 steps; blocks circulate one hop per step.
Status RingAllgatherBlocks(Context& c, uint8_t* buf, const Blocks& blocks) {
  const size_t es = c.elem_size();
  const patterns::Ring ring{c.rank(), c.size()};
  for (int s = 0; s < ring.Steps(); ++s) {
    const auto& sb = blocks[static_cast<size_t>(ring.AllgatherSendBlock(s))];
    const auto& rb = blocks[static_cast<size_t>(ring.AllgatherRecvBlock(s))];
    CHOIR_RETURN_IF_ERROR(c.Run({c.Send(ring.Right(), buf + sb.offset * es, sb.count * es),
                                 c.Recv(ring.Left(), buf + rb.offset * es, rb.count * es)}));
  }
  return Status::Ok();
}

// Cost: 1 step; every block crosses once to each other rank (pushed by its
// owner while it fits the caches, pulled by the reader beyond).
Status CmaAllgatherBlocks(Context& c, uint8_t* buf, const Blocks& blocks) {
  AreaOp op(c);
  uint8_t* own = buf + blocks[static_cast<size_t>(c.rank())].offset * c.elem_size();
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, own, buf));
  return CmaAllgatherWith(op, own, buf, blocks);
}

Status CmaAllgatherWith(AreaOp& op, const uint8_t* own, uint8_t* buf, const Blocks& blocks) {
  Context& c = op.ctx();
  const std::vector<PeerBuffers>& bufs = op.peers();
  const size_t es = c.elem_size();
  const auto& mine = blocks[static_cast<size_t>(op.me())];
  size_t total = 0;
  for (const auto& b : blocks) total += b.count;
  // Copies into SharedBuffers stream from a smaller size than CopyIfDistinct's.
  const bool shared = op.AllShared();
  const bool streaming = shared && total * es >= kSharedGatherStreamingBytes;
  // A block under the table's CmaPushMaxBytes (4 MiB; with a core per
  // rank 1 MiB on the Zen 4 table, 512 KiB on the amd one) is pushed by its
  // owner (process_vm_writev from its cache, measured faster than the
  // reader pulling it but on AMD from those sizes: switch_points.cc); a
  // larger one is pulled by each reader (CopyFromPeer, with streaming
  // stores when huge). Into SharedBuffers the owner pushes every block,
  // with streaming stores. Every rank derives the same choice from the
  // block sizes, the table and AllShared().
  const GroupView view = c.View();
  const uint64_t push_max = CmaPushMaxBytes(view.switch_table, view.shares_cpus);
  auto pushed = [&](int p) {
    return shared || blocks[static_cast<size_t>(p)].count * es < push_max;
  };
  // The owner copies its block into its own output and pushes it a
  // cache-sized piece at a time, so that it reads its input from memory once
  // (SharedBuffers 1.10x-1.35x faster from 4 MiB, heap 1.15x-1.18x at
  // 1-4 MiB: docs/performance-log.md, "Mid-size calls and 4-rank scaling").
  // A block the peers pull is copied in one piece.
  const size_t bytes = mine.count * es;
  uint8_t* my_dst = buf + mine.offset * es;
  const bool own_streaming = shared ? streaming : bytes >= kCopyStreamingBytes;  // as CopyIfDistinct
  const bool push = pushed(op.me()) && op.size() > 1;
  const size_t piece = push ? kCmaChunkBytes / 2 : bytes;
  for (size_t off = 0; off < bytes; off += piece) {
    const size_t m = std::min(piece, bytes - off);
    if (my_dst != own) kernels::CopyBytes(my_dst + off, own + off, m, own_streaming);
    for (int s = 1; s < op.size() && push; ++s) {
      const int p = (op.me() + s) % op.size();
      CHOIR_RETURN_IF_ERROR(
          CopyToPeer(op, p, bufs[static_cast<size_t>(p)].recv + mine.offset * es + off, own + off, m, streaming));
    }
  }
  for (int s = 1; s < op.size(); ++s) {
    const int p = (op.me() + s) % op.size();
    const auto& b = blocks[static_cast<size_t>(p)];
    if (pushed(p)) {
      c.CountSharedRead(p, b.count * es);  // written here by its owner
      continue;
    }
    CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, p, buf + b.offset * es, bufs[static_cast<size_t>(p)].send, b.count * es));
  }
  // Finish() also tells every rank that the pushes into its buffer are complete.
  return op.Finish();
}

Status AllgatherBlocks(Context& c, uint8_t* buf, const Blocks& blocks) {
  if (LocalGroupUsable(c)) {
    if (PipeFirst(c, CollKind::kAllgather, blocks)) return PipeAllgatherBlocks(c, buf, blocks);
    if (c.local_group()->cma) return CmaAllgatherBlocks(c, buf, blocks);
  }
  return RingAllgatherBlocks(c, buf, blocks);
}

}  // namespace choir::algorithms
