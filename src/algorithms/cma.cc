// Cost: 1 step; every byte crosses between processes once (process_vm_readv),
// n ranks working in parallel on their own share. For large messages on one
// host when the kernel allows cross-memory attach.
//
// cma: ranks publish the addresses of their user buffers in the host's shared
// area (local_ops.h); each rank then reads what it needs straight out of its
// peers' memory. Allreduce is a reduce-scatter (rank r combines slice r of all
// inputs into its own output, chunk by chunk) followed by an allgather: below
// 4 MiB rank r writes each finished chunk into every peer's output itself
// (process_vm_writev, from its cache); beyond, every rank copies the finished
// slices out of their owners' outputs as soon as they are announced. A reduce
// is the first half of that: every rank combines its slice (the root a
// larger one), and the others write theirs into the root's output. Reads go
// through a small cache-resident buffer and large results are written with
// streaming stores, so each output byte costs one DRAM write. A broadcast
// root does not idle: it writes a share of the buffer into each receiver
// (process_vm_writev) while they read the rest. A gather's blocks are
// written into the root's output by their owners, all at once. A rank
// returns only when every peer has stopped reading (or writing) its buffers.
#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "algorithms/algorithms.h"
#include "algorithms/block_steps.h"
#include "algorithms/local_ops.h"
#include "topology/machine.h"

namespace choir::algorithms {
namespace {
// Scratch: not a slot of the steps (0) or of hier (1, 2). A reduce's pieces
// or an in-place alltoallv's held blocks, never both in one call.
constexpr int kCmaScratchSlot = 3;

// The slices of a reduce: a rank other than the root also writes its slice
// into the root's output, so the root takes a larger slice, one that ends
// both kinds of rank at the same time if combining a byte of an input costs
// `combine` of copying it between processes (CmaReduceCombineCost):
//   w * ((n-1) + combine*n) = (n-1) + combine*n + 1,
//   w = 1 + 1/((n-1) + combine*n),
// with combine 0.2: 1.71 for 2 ranks, 1.26 for 4; with 1.2: 1.29 and 1.13.
// The root's slice is a multiple of 16 elements long.
Blocks ReduceSlices(size_t count, int n, int root, double combine) {
  return patterns::WeightedBlocks(count, n, root, 1.0 + 1.0 / ((n - 1.0) + combine * n), 16);
}
}  // namespace

Status AllreduceCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, a.send, a.recv));
  return CmaReduceWith(op, static_cast<const uint8_t*>(a.send), static_cast<uint8_t*>(a.recv),
                       EvenBlocks(a.count, c.size()), /*gather=*/true, /*average=*/true);
}

Status CmaReduceWith(AreaOp& op, const uint8_t* in, uint8_t* out, const Blocks& slices, bool gather, bool average) {
  Context& c = op.ctx();
  const std::vector<PeerBuffers>& bufs = op.peers();
  const int n = op.size();
  const size_t es = c.elem_size();
  const auto& mine = slices[static_cast<size_t>(op.me())];
  uint8_t* my_out = gather ? out + mine.offset * es : out;
  size_t total = 0;
  for (const auto& b : slices) total += b.count;
  const bool slice_streams = mine.count * es >= kStreamingBytes;
  if (!gather) {
    CHOIR_RETURN_IF_ERROR(ReduceFromPeers(op, in, mine.offset * es, mine.count, my_out, nullptr,
                                          {.push = false, .streaming = slice_streams, .average = average}));
    return op.Finish();
  }
  // Below kStreamingBytes the owner of a slice pushes each combined chunk
  // into every peer's output while it is still in its cache (no gather
  // phase, no waiting on a peer's progress); beyond, the peers pull the
  // finished slices so that their copies can use streaming stores
  // (process_vm_writev's stores into the peer are not streaming and cost
  // about as much as the pull: docs/performance-log.md). Into SharedBuffers the
  // owner always pushes, with plain stores below
  // SharedReduceStreamingBytes and streaming stores beyond.
  const bool shared = op.AllShared();
  if (total * es < kStreamingBytes || shared) {
    static const size_t l3_bytes = topology::CacheBytes(3);
    const bool streaming =
        shared ? total * es >= SharedReduceStreamingBytes(n, c.local_group()->ranks_share_cpus, l3_bytes)
               : slice_streams;
    CHOIR_RETURN_IF_ERROR(ReduceFromPeers(op, in, mine.offset * es, mine.count, my_out, nullptr,
                                          {.push = true, .streaming = streaming, .average = average}));
    for (int p = 0; p < n; ++p) {
      if (p != op.me()) c.CountSharedRead(p, slices[static_cast<size_t>(p)].count * es);  // written here by its owner
    }
    return op.Finish();
  }
  CHOIR_RETURN_IF_ERROR(ReduceFromPeers(op, in, mine.offset * es, mine.count, my_out,
                                        [&](uint64_t k, uint8_t*, size_t) { op.SetProgress(k + 1); },
                                        {.push = false, .streaming = slice_streams, .average = average}));
  const size_t chunk = std::max<size_t>(1, kCmaChunkBytes / es);
  for (int s = 1; s < n; ++s) {
    const int p = (op.me() + s) % n;
    const auto& pb = slices[static_cast<size_t>(p)];
    uint64_t k = 0;
    for (size_t done = 0; done < pb.count; done += chunk, ++k) {
      const size_t m = std::min(chunk, pb.count - done);
      const size_t off = (pb.offset + done) * es;
      CHOIR_RETURN_IF_ERROR(op.WaitProgress(p, k + 1));
      CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, p, out + off, bufs[static_cast<size_t>(p)].recv + off, m * es));
    }
  }
  return op.Finish();
}

Status ReduceScatterCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, a.send, a.recv));
  return CmaReduceWith(op, static_cast<const uint8_t*>(a.send), static_cast<uint8_t*>(a.recv),
                       EvenBlocks(a.count * static_cast<size_t>(c.size()), c.size()), /*gather=*/false,
                       /*average=*/true);
}

Status AllgatherCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, a.send, a.recv));
  return CmaAllgatherWith(op, static_cast<const uint8_t*>(a.send), static_cast<uint8_t*>(a.recv),
                          patterns::BlocksFromCounts(a.RecvCounts(c.size())));
}

Status BroadcastCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, c.rank() == a.root ? a.send : nullptr, a.recv));
  return BroadcastCmaWith(op, a);
}

Status BroadcastCmaWith(AreaOp& op, const OpArgs& a) {
  Context& c = op.ctx();
  const bool root = c.rank() == a.root;
  const std::vector<PeerBuffers>& bufs = op.peers();
  const size_t bytes = a.count * c.elem_size();
  // An in-place root's core would idle while every receiver copies: it
  // writes the tail of the buffer into each receiver itself
  // (process_vm_writev), a share sized so that both sides finish together:
  // (n-1)*share = bytes-share. A root that copies send to recv is busy enough.
  const PeerBuffers& from = bufs[static_cast<size_t>(a.root)];
  const bool root_idle = from.send == from.recv;
  const size_t share =
      root_idle && bytes >= kRootShareMinBytes ? bytes / static_cast<size_t>(op.size()) / 64 * 64 : 0;
  const size_t head = bytes - share;
  if (root) {
    CopyIfDistinct(a.recv, a.send, bytes);
    for (int s = 1; s < op.size() && share > 0; ++s) {
      const int p = (op.me() + s) % op.size();
      CHOIR_RETURN_IF_ERROR(CopyToPeer(op, p, bufs[static_cast<size_t>(p)].recv + head,
                                       static_cast<const uint8_t*>(a.send) + head, share));
    }
  } else {
    CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, a.root, static_cast<uint8_t*>(a.recv),
                                       bufs[static_cast<size_t>(a.root)].send, head));
    c.CountSharedRead(a.root, share);  // what the root wrote here
  }
  // Finish() also tells the receivers that the root's writes are complete.
  return op.Finish();
}

Status ReduceCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, a.send, a.recv));
  return ReduceCmaWith(op, static_cast<const uint8_t*>(a.send), static_cast<uint8_t*>(a.recv), a.count, a.root);
}

Status ReduceCmaWith(AreaOp& op, const uint8_t* send, uint8_t* recv, size_t count, int root_rank) {
  // Every rank combines its own slice of all the inputs (n cores at work, not
  // the root's alone); the others then write their slice into the root's
  // output, a cache-sized piece at a time.
  Context& c = op.ctx();
  const size_t es = c.elem_size();
  const bool root = c.rank() == root_rank;
  const double combine = CmaReduceCombineCost(c.HostSwitchTable(), op.ReduceShared(root_rank));
  const Blocks slices = ReduceSlices(count, c.size(), root_rank, combine);
  const auto& mine = slices[static_cast<size_t>(op.me())];
  if (root) {
    uint8_t* out = recv + mine.offset * es;
    CHOIR_RETURN_IF_ERROR(ReduceFromPeers(op, send, mine.offset * es, mine.count, out, nullptr,
                                          {.push = false, .streaming = count * es >= kStreamingBytes,
                                           .average = true}));
    for (int p = 0; p < op.size(); ++p) {
      if (p != op.me()) c.CountSharedRead(p, slices[static_cast<size_t>(p)].count * es);  // written here by its owner
    }
  } else {
    const uint64_t root_out = op.peers()[static_cast<size_t>(root_rank)].recv;
    const size_t piece = std::max<size_t>(1, kCmaChunkBytes / es);
    CHOIR_ASSIGN_OR_RETURN(uint8_t* tmp, c.ScratchBytes(std::min(piece, mine.count) * es, kCmaScratchSlot));
    for (size_t done = 0; done < mine.count; done += piece) {
      const size_t m = std::min(piece, mine.count - done);
      const uint64_t off = (mine.offset + done) * es;
      CHOIR_RETURN_IF_ERROR(ReduceFromPeers(op, send, off, m, tmp, nullptr, {.average = true}));
      CHOIR_RETURN_IF_ERROR(CopyToPeer(op, root_rank, root_out + off, tmp, m * es));
    }
  }
  return op.Finish();
}

Status GatherCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, a.send, a.recv));
  const size_t block = a.count * c.elem_size();
  // Every rank writes its block into the root's output itself, all at once
  // (process_vm_writev), while the root copies its own: 1.2x-2.4x faster
  // than the root reading the blocks one after another from 256 KiB to
  // 256 MiB, with 2 and 4 ranks (docs/performance-log.md, "Mid-size calls and
  // 4-rank scaling").
  if (c.rank() == a.root) {
    CopyIfDistinct(static_cast<uint8_t*>(a.recv) + static_cast<size_t>(a.root) * block, a.send, block);
    for (int p = 0; p < op.size(); ++p) {
      if (p != op.me()) c.CountSharedRead(p, block);  // written here by its owner
    }
  } else if (block > 0) {
    const uint64_t dst = op.peers()[static_cast<size_t>(a.root)].recv + static_cast<uint64_t>(op.me()) * block;
    // Into a SharedBuffer the copy streams from the size an allgather's does.
    const bool streaming = block * static_cast<size_t>(op.size()) >= kSharedGatherStreamingBytes;
    CHOIR_RETURN_IF_ERROR(CopyToPeer(op, a.root, dst, a.send, block, streaming));
  }
  // Finish() also tells the root that the pushes into its output are complete.
  return op.Finish();
}

Status ScatterCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, a.send, a.recv));
  const std::vector<PeerBuffers>& bufs = op.peers();
  const size_t block = a.count * c.elem_size();
  const size_t mine = static_cast<size_t>(c.rank()) * block;
  if (c.rank() == a.root) {
    CopyIfDistinct(a.recv, static_cast<const uint8_t*>(a.send) + mine, block);
  } else {
    CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, a.root, static_cast<uint8_t*>(a.recv),
                                       bufs[static_cast<size_t>(a.root)].send + mine, block));
  }
  return op.Finish();
}

Status AlltoallCma(Context& c, const OpArgs& a) {
  const int n = c.size();
  const auto nn = static_cast<size_t>(n);
  const size_t es = c.elem_size();
  const Blocks sblocks = patterns::BlocksFromCounts(a.SendCounts(n));
  const Blocks rblocks = patterns::BlocksFromCounts(a.RecvCounts(n));
  // Per peer p: where this rank's block for p starts in its input, its
  // length, and the length this rank expects from p. Readers find their
  // block with the first; the lengths let both ranks of a pair whose
  // uneven splits disagree fail alike, before a byte moves, instead of one
  // reading past the block it was given.
  std::vector<uint64_t> table(3 * nn);
  for (size_t p = 0; p < nn; ++p) {
    table[p] = sblocks[p].offset * es;
    table[nn + p] = sblocks[p].count * es;
    table[2 * nn + p] = rblocks[p].count * es;
  }
  const bool in_place = a.send == a.recv;
  const auto* send = static_cast<const uint8_t*>(a.send);
  AreaOp op(c);
  std::vector<std::vector<uint64_t>> tables;
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, send, a.recv, table, &tables));
  const std::vector<PeerBuffers>& bufs = op.peers();
  const auto me = static_cast<size_t>(op.me());
  for (size_t p = 0; p < nn; ++p) {
    if (p == me) continue;
    const uint64_t in_sent = tables[p][nn + me], in_expected = rblocks[p].count * es;
    const uint64_t out_sent = sblocks[p].count * es, out_expected = tables[p][2 * nn + me];
    if (in_sent != in_expected || out_sent != out_expected) {
      const bool in = in_sent != in_expected;
      return Status(Code::kCollectiveMismatch,
                    fmt::format("alltoallv splits disagree: rank {} sends {} bytes to rank {}, which expects {} "
                                "(send_counts[j] on rank i must equal recv_counts[i] on rank j)",
                                c.CommRank(static_cast<int>(in ? p : me)), in ? in_sent : out_sent,
                                c.CommRank(static_cast<int>(in ? me : p)), in ? in_expected : out_expected));
    }
  }
  // An alltoall of which any rank runs in place goes through the pipe
  // instead, where the pipe can carry it: the same answer on every rank
  // (all see the same addresses, and PipeUsable reads settings the host's
  // ranks share). There no rank writes lines a peer has just read out of
  // its buffer. 2 ranks on the Zen 4 host, 64-512 KiB, against the same
  // alltoall out of place (paired medians of 7 launches): 0.75x-0.95x,
  // where peers reading a copy of the input ran 0.47x-0.63x
  // (docs/performance-log.md, "In place").
  if (op.AnyInPlace() && a.kind == CollKind::kAlltoall && PipeUsable(c.View(), a)) {
    CHOIR_RETURN_IF_ERROR(op.Finish());
    c.NotePipeWalk();
    return AlltoallPipe(c, a);
  }
  auto* out = static_cast<uint8_t*>(a.recv);
  if (!in_place) {
    CopyIfDistinct(out + rblocks[me].offset * es, send + sblocks[me].offset * es, rblocks[me].count * es);
    for (int s = 1; s < n; ++s) {
      const auto p = static_cast<size_t>((op.me() + s) % n);
      CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, static_cast<int>(p), out + rblocks[p].offset * es,
                                         bufs[p].send + tables[p][me], rblocks[p].count * es));
    }
    return op.Finish();
  }
  // In place (an alltoallv, or an alltoall whose pipe cannot carry it), a
  // peer may still need a block this rank would overwrite: the peers'
  // blocks go to the communicator's scratch first and into the output, with
  // streaming stores, once every peer has read its own (the lines a peer
  // has just read cost this rank more to write: 0.60x-0.64x of the same
  // alltoall out of place, 0.44x-0.58x with plain stores, 2 ranks on the
  // Zen 4 host at 64-512 KiB). In place the counts sent and received are
  // equal (the Communicator checks), so every block lies in the output
  // where it lay in the input and this rank's own stays where it is.
  auto held = c.ScratchBytes(patterns::ElemsSpanned(rblocks) * es, kCmaScratchSlot);
  if (!held.ok()) {
    // The peers still read this rank's input; it fails once they are done.
    CHOIR_RETURN_IF_ERROR(op.Finish());
    return held.status();
  }
  for (int s = 1; s < n; ++s) {
    const auto p = static_cast<size_t>((op.me() + s) % n);
    CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, static_cast<int>(p), *held + rblocks[p].offset * es,
                                       bufs[p].send + tables[p][me], rblocks[p].count * es));
  }
  CHOIR_RETURN_IF_ERROR(op.Finish());
  for (size_t p = 0; p < nn; ++p) {
    if (p == me) continue;
    kernels::CopyBytes(out + rblocks[p].offset * es, *held + rblocks[p].offset * es, rblocks[p].count * es,
                       /*nontemporal=*/true);
  }
  return Status::Ok();
}

bool CmaUsable(const GroupView& g, const OpArgs&) { return g.same_host && g.cma; }

}  // namespace choir::algorithms
