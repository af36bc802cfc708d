// Cost: 1 step; every byte crosses between processes once (process_vm_readv),
// n ranks working in parallel on their own share. For large messages on one
// host when the kernel allows cross-memory attach.
//
// cma: ranks publish the addresses of their user buffers in the host's shared
// area; each rank then reads what it needs straight out of its peers' memory.
// Allreduce is a reduce-scatter (rank r combines slice r of all inputs into
// its own output, chunk by chunk, announcing each finished chunk) followed by
// an allgather (every rank copies the finished slices out of their owners'
// outputs). Reads go through a small cache-resident buffer and results are
// written with streaming stores, so each output byte costs one DRAM write.
// A rank returns only when every peer has stopped reading its buffers.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/local_ops.h"
#include "algorithms/patterns/blocks.h"

namespace choir::algorithms {
namespace {

constexpr size_t kChunkBytes = 512 * 1024;     // per peer buffer: fits the L2 cache
constexpr size_t kStreamingBytes = 4u << 20;    // outputs at least this large bypass the caches

struct Addresses {
  uint64_t send = 0;
  uint64_t recv = 0;
};

// Publishes this rank's buffer addresses (plus an optional table) and reads everyone's.
Status Exchange(AreaOp& op, const void* send, void* recv, std::vector<Addresses>* all,
                const std::vector<uint64_t>& table = {}, std::vector<std::vector<uint64_t>>* tables = nullptr) {
  CHOIR_RETURN_IF_ERROR(op.Acquire());
  const Addresses mine{reinterpret_cast<uint64_t>(send), reinterpret_cast<uint64_t>(recv)};
  std::memcpy(op.my_data(), &mine, sizeof(mine));
  if (!table.empty()) std::memcpy(op.my_data() + sizeof(mine), table.data(), table.size() * sizeof(uint64_t));
  op.Publish(sizeof(mine) + table.size() * sizeof(uint64_t));
  CHOIR_RETURN_IF_ERROR(op.WaitAll());
  all->resize(static_cast<size_t>(op.size()));
  if (tables) tables->resize(static_cast<size_t>(op.size()));
  for (int p = 0; p < op.size(); ++p) {
    std::memcpy(&(*all)[static_cast<size_t>(p)], op.data(p), sizeof(Addresses));
    if (tables) {
      auto& t = (*tables)[static_cast<size_t>(p)];
      t.resize(table.size());
      std::memcpy(t.data(), op.data(p) + sizeof(Addresses), table.size() * sizeof(uint64_t));
    }
  }
  op.FinishReads();
  return Status::Ok();
}

size_t ChunkElems(size_t es) { return std::max<size_t>(1, kChunkBytes / es); }

// Copies `bytes` from peer p's memory into `dst`, through a cache-resident
// buffer and streaming stores when large (avoids reading the destination).
Status CopyFromPeer(AreaOp& op, int p, uint8_t* dst, uint64_t remote, size_t bytes) {
  Context& c = op.ctx();
  if (bytes < kStreamingBytes) return ReadRemote(op.pid(p), c.CommRank(p), dst, remote, bytes);
  CHOIR_ASSIGN_OR_RETURN(uint8_t* tmp, c.ScratchBytes(kChunkBytes));
  for (size_t done = 0; done < bytes; done += kChunkBytes) {
    const size_t m = std::min(kChunkBytes, bytes - done);
    CHOIR_RETURN_IF_ERROR(ReadRemote(op.pid(p), c.CommRank(p), tmp, remote + done, m));
    kernels::CopyBytes(dst + done, tmp, m, /*nontemporal=*/true);
  }
  return Status::Ok();
}

}  // namespace

Status AllreduceCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  std::vector<Addresses> addrs;
  CHOIR_RETURN_IF_ERROR(Exchange(op, a.send, a.recv, &addrs));
  const int n = op.size();
  const size_t es = c.elem_size();
  const size_t chunk = ChunkElems(es);
  auto* out = static_cast<uint8_t*>(a.recv);
  const auto* in = static_cast<const uint8_t*>(a.send);
  // Reduce-scatter: this rank's slice of every input, into its own output.
  const patterns::Block mine = patterns::EvenBlock(a.count, n, op.me());
  {
    CHOIR_ASSIGN_OR_RETURN(uint8_t* tmp, c.ScratchBytes(static_cast<size_t>(n) * chunk * es));
    std::vector<const void*> srcs(static_cast<size_t>(n));
    const bool streaming = a.count * es >= kStreamingBytes;
    uint64_t k = 0;
    for (size_t done = 0; done < mine.count; done += chunk, ++k) {
      const size_t m = std::min(chunk, mine.count - done);
      const size_t off = (mine.offset + done) * es;
      for (int p = 0; p < n; ++p) {
        if (p == op.me()) {
          srcs[static_cast<size_t>(p)] = in + off;
          continue;
        }
        uint8_t* buf = tmp + static_cast<size_t>(p) * chunk * es;
        CHOIR_RETURN_IF_ERROR(ReadRemote(op.pid(p), c.CommRank(p), buf, addrs[static_cast<size_t>(p)].send + off, m * es));
        srcs[static_cast<size_t>(p)] = buf;
      }
      kernels::ReduceMany(out + off, srcs.data(), n, m, c.dtype(), c.op(), streaming);
      FinishAverage(c, out + off, m);
      op.SetProgress(k + 1);
    }
  }
  // Allgather: every other slice, from its owner's output, once it is finished.
  for (int s = 1; s < n; ++s) {
    const int p = (op.me() + s) % n;
    const patterns::Block pb = patterns::EvenBlock(a.count, n, p);
    uint64_t k = 0;
    for (size_t done = 0; done < pb.count; done += chunk, ++k) {
      const size_t m = std::min(chunk, pb.count - done);
      const size_t off = (pb.offset + done) * es;
      CHOIR_RETURN_IF_ERROR(op.WaitProgress(p, k + 1));
      CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, p, out + off, addrs[static_cast<size_t>(p)].recv + off, m * es));
    }
  }
  return op.Finish();
}

Status ReduceScatterCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  std::vector<Addresses> addrs;
  CHOIR_RETURN_IF_ERROR(Exchange(op, a.send, a.recv, &addrs));
  const int n = op.size();
  const size_t es = c.elem_size();
  const size_t chunk = ChunkElems(es);
  CHOIR_ASSIGN_OR_RETURN(uint8_t* tmp, c.ScratchBytes(static_cast<size_t>(n) * chunk * es));
  const auto* in = static_cast<const uint8_t*>(a.send);
  auto* out = static_cast<uint8_t*>(a.recv);
  const size_t base = static_cast<size_t>(op.me()) * a.count * es;  // my block in every input
  std::vector<const void*> srcs(static_cast<size_t>(n));
  const bool streaming = a.count * es >= kStreamingBytes;
  for (size_t done = 0; done < a.count; done += chunk) {
    const size_t m = std::min(chunk, a.count - done);
    const size_t off = done * es;
    for (int p = 0; p < n; ++p) {
      if (p == op.me()) {
        srcs[static_cast<size_t>(p)] = in + base + off;
        continue;
      }
      uint8_t* buf = tmp + static_cast<size_t>(p) * chunk * es;
      CHOIR_RETURN_IF_ERROR(ReadRemote(op.pid(p), c.CommRank(p), buf, addrs[static_cast<size_t>(p)].send + base + off, m * es));
      srcs[static_cast<size_t>(p)] = buf;
    }
    kernels::ReduceMany(out + off, srcs.data(), n, m, c.dtype(), c.op(), streaming);
  }
  FinishAverage(c, out, a.count);
  return op.Finish();
}

Status AllgatherCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  std::vector<Addresses> addrs;
  CHOIR_RETURN_IF_ERROR(Exchange(op, a.send, a.recv, &addrs));
  const int n = op.size();
  const size_t es = c.elem_size();
  std::vector<size_t> counts = a.recv_counts;
  if (a.kind == CollKind::kAllgather) counts.assign(static_cast<size_t>(n), a.count);
  const auto blocks = patterns::BlocksFromCounts(counts);
  auto* out = static_cast<uint8_t*>(a.recv);
  const auto& mine = blocks[static_cast<size_t>(op.me())];
  CopyIfDistinct(out + mine.offset * es, a.send, mine.count * es);
  for (int s = 1; s < n; ++s) {
    const int p = (op.me() + s) % n;
    const auto& b = blocks[static_cast<size_t>(p)];
    CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, p, out + b.offset * es, addrs[static_cast<size_t>(p)].send, b.count * es));
  }
  return op.Finish();
}

Status BroadcastCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  std::vector<Addresses> addrs;
  const bool root = c.rank() == a.root;
  CHOIR_RETURN_IF_ERROR(Exchange(op, root ? a.send : nullptr, a.recv, &addrs));
  const size_t bytes = a.count * c.elem_size();
  if (root) {
    CopyIfDistinct(a.recv, a.send, bytes);
  } else {
    CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, a.root, static_cast<uint8_t*>(a.recv),
                                       addrs[static_cast<size_t>(a.root)].send, bytes));
  }
  return op.Finish();
}

Status ReduceCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  std::vector<Addresses> addrs;
  CHOIR_RETURN_IF_ERROR(Exchange(op, a.send, a.recv, &addrs));
  if (c.rank() == a.root) {
    const int n = op.size();
    const size_t es = c.elem_size();
    const size_t chunk = ChunkElems(es);
    CHOIR_ASSIGN_OR_RETURN(uint8_t* tmp, c.ScratchBytes(static_cast<size_t>(n) * chunk * es));
    const auto* in = static_cast<const uint8_t*>(a.send);
    auto* out = static_cast<uint8_t*>(a.recv);
    std::vector<const void*> srcs(static_cast<size_t>(n));
    const bool streaming = a.count * es >= kStreamingBytes;
    for (size_t done = 0; done < a.count; done += chunk) {
      const size_t m = std::min(chunk, a.count - done);
      const size_t off = done * es;
      for (int p = 0; p < n; ++p) {
        if (p == op.me()) {
          srcs[static_cast<size_t>(p)] = in + off;
          continue;
        }
        uint8_t* buf = tmp + static_cast<size_t>(p) * chunk * es;
        CHOIR_RETURN_IF_ERROR(ReadRemote(op.pid(p), c.CommRank(p), buf, addrs[static_cast<size_t>(p)].send + off, m * es));
        srcs[static_cast<size_t>(p)] = buf;
      }
      kernels::ReduceMany(out + off, srcs.data(), n, m, c.dtype(), c.op(), streaming);
    }
    FinishAverage(c, out, a.count);
  }
  return op.Finish();
}

Status GatherCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  std::vector<Addresses> addrs;
  CHOIR_RETURN_IF_ERROR(Exchange(op, a.send, a.recv, &addrs));
  if (c.rank() == a.root) {
    const size_t block = a.count * c.elem_size();
    auto* out = static_cast<uint8_t*>(a.recv);
    CopyIfDistinct(out + static_cast<size_t>(a.root) * block, a.send, block);
    for (int s = 1; s < op.size(); ++s) {
      const int p = (op.me() + s) % op.size();
      CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, p, out + static_cast<size_t>(p) * block,
                                         addrs[static_cast<size_t>(p)].send, block));
    }
  }
  return op.Finish();
}

Status ScatterCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  std::vector<Addresses> addrs;
  CHOIR_RETURN_IF_ERROR(Exchange(op, a.send, a.recv, &addrs));
  const size_t block = a.count * c.elem_size();
  const size_t mine = static_cast<size_t>(c.rank()) * block;
  if (c.rank() == a.root) {
    CopyIfDistinct(a.recv, static_cast<const uint8_t*>(a.send) + mine, block);
  } else {
    CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, a.root, static_cast<uint8_t*>(a.recv),
                                       addrs[static_cast<size_t>(a.root)].send + mine, block));
  }
  return op.Finish();
}

Status AlltoallCma(Context& c, const OpArgs& a) {
  AreaOp op(c);
  const int n = op.size();
  const size_t es = c.elem_size();
  std::vector<size_t> sc = a.send_counts, rc = a.recv_counts;
  if (a.kind == CollKind::kAlltoall) {
    sc.assign(static_cast<size_t>(n), a.count);
    rc.assign(static_cast<size_t>(n), a.count);
  }
  const auto sblocks = patterns::BlocksFromCounts(sc);
  const auto rblocks = patterns::BlocksFromCounts(rc);
  std::vector<uint64_t> offsets(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) offsets[static_cast<size_t>(p)] = sblocks[static_cast<size_t>(p)].offset * es;
  // In place, a peer may still need the block this rank is about to overwrite:
  // read from a private copy of the input.
  const void* send = a.send;
  std::vector<uint8_t> copy;
  if (a.send == a.recv) {
    const size_t total = (sblocks.back().offset + sblocks.back().count) * es;
    copy.assign(static_cast<const uint8_t*>(a.send), static_cast<const uint8_t*>(a.send) + total);
    send = copy.data();
  }
  std::vector<Addresses> addrs;
  std::vector<std::vector<uint64_t>> tables;
  CHOIR_RETURN_IF_ERROR(Exchange(op, send, a.recv, &addrs, offsets, &tables));
  auto* out = static_cast<uint8_t*>(a.recv);
  const size_t me = static_cast<size_t>(op.me());
  CopyIfDistinct(out + rblocks[me].offset * es, static_cast<const uint8_t*>(send) + sblocks[me].offset * es,
                 rblocks[me].count * es);
  for (int s = 1; s < n; ++s) {
    const auto p = static_cast<size_t>((op.me() + s) % n);
    CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, static_cast<int>(p), out + rblocks[p].offset * es,
                                       addrs[p].send + tables[p][me], rblocks[p].count * es));
  }
  return op.Finish();
}

bool CmaUsable(const Context& c, const OpArgs&) {
  return LocalGroupUsable(c) && c.local_group()->cma;
}

}  // namespace choir::algorithms
