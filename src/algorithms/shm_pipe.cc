// Cost: 1 step; each input byte is read from memory once and each output byte
// written once (streaming stores for large outputs, plain ones in place,
// where they land on lines just read); the exchange between ranks runs through
// the caches. For large messages on one host, with or without
// process_vm_readv: allreduce, reduce_scatter, reduce, allgather, alltoall
// and broadcast.
//
// shm_pipe: the buffer is cut into n slices (rank r owns slice r) and every
// slice into chunks that fit the caches; the ranks walk the chunks in steps.
// In step k a rank
//   A. stages its input chunk k of every peer's slice in its own pipe,
//   B. combines chunk k of its own slice from its input and the chunks its
//      peers staged for it, stages the result and writes it to its output,
//   C. copies chunk k of every peer's result from their pipes to its output.
// Each pipe holds two steps (two positions, taken in turn by the steps
// staged into it, walk after walk: Walk::first_parity) of n chunks: n-1
// inputs for the peers and one result. A rank overwrites a position only
// after every peer has consumed the step that used it before
// (AreaCtl::consumed within a walk, AreaOp::Finish at the end of the walk
// before); progress
// counters (2k+1: inputs staged, 2k+2: result staged) order A, B and C.
// A reduce_scatter stops after B and, unless it averages apart (types
// other than float32 and float64: DividesApart), combines straight
// into its output (in place, into its own slice of its input: the one overlap
// the Communicator lets through); in a reduce only the root runs C (and the
// other ranks write no output), and its root combines straight into its
// output too where that does not overwrite input still to be staged, or in
// place into its own slice. Allgather is the same walk with one chunk per
// step: each rank stages chunk k of its block (progress k+1) and copies chunk
// k of every peer's block; a broadcast's root alone stages, the others copy.
// Alltoall is the reduce walk without the combining: a rank stages chunk k of
// its block for every peer and copies chunk k of the block every peer staged
// for it. Chunks are bounded by the L2 cache as well as by the pipe.
//
// With CHOIR_SHM_ADAPT=1, allgather and alltoall with heap buffers may take
// cma's walk instead, call by call, when the ranks' own timings say it is
// faster (walk_choice.h). Whether a rank stages with plain or streaming
// stores, each rank measures while the job runs (CHOIR_SHM_STAGING=auto,
// StagingChooser in walk_choice.h): on some hosts reading what the other
// core has just written is slow in spells, on one (Zen 5, a core per rank)
// slower than reading memory, and there streaming comes first
// (StagingStreamsFirst in switch_points.h).
//
// Against cma, which copies through the kernel (process_vm_readv ran at
// 5.3-5.6 GB/s per core on the Intel host, 8.5-9.4 on the AMD one:
// docs/performance-log.md), every copy is a user-space vector copy of data that
// is still in a cache, and the memory traffic is the minimum: read the
// input once, write the output once. Reductions combine the ranks in rank
// order, so every rank gets bit-identical results.
#include <algorithm>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/block_steps.h"
#include "algorithms/local_ops.h"
#include "algorithms/select.h"
#include "algorithms/switch_points.h"
#include "algorithms/walk_choice.h"
#include "base/clock.h"
#include "kernels/reduce.h"

namespace choir::algorithms {
namespace {

using patterns::Block;
using patterns::ElemsSpanned;

// Bytes per chunk of `parts` chunks per step, two steps in the pipe: the
// pipe's share, but no more than a step's share of the L2 cache (L2 / (2 x
// cached_parts), `cached_parts` being the chunks a step stages, at most
// `parts`; `cache_bytes`, the smallest L2 of the host's ranks, agreed when
// they connect), so that a staged chunk is still in a cache when it is read.
// On the AMD host (512 KiB of L2) that made 4-64 MiB allreduces 1.1-1.3x faster
// with 2 ranks, allreduces and reduce_scatters 1.0-1.6x with 4, and 4-16 MiB
// allgathers 1.2x (docs/algorithms.md, "Switch points per host"). The same
// on every rank of the host.
size_t ChunkBytes(size_t pipe_bytes, size_t cache_bytes, size_t parts, size_t cached_parts) {
  size_t bytes = pipe_bytes / (2 * parts) / 64 * 64;
  if (cache_bytes >= 64 * 1024) bytes = std::min(bytes, cache_bytes / (2 * cached_parts) / 64 * 64);
  return bytes;
}
size_t ChunkBytes(size_t pipe_bytes, size_t cache_bytes, size_t parts) {
  return ChunkBytes(pipe_bytes, cache_bytes, parts, parts);
}

// How a rank walks `blocks` in chunks of `chunk` elements.
struct Walk {
  uint64_t steps;  // the same on every rank: the largest block decides
  bool streaming;  // outputs large enough for streaming stores
  bool shared;     // every rank's buffers are SharedBuffers: no pipe needed
  bool stage_streaming;  // chunks staged for peers with streaming stores (set by RunStaged)
  bool shares_cpus;      // more local ranks than cores (GroupView::shares_cpus)
  // The pipe position of step 0 in each local rank's pipe (by local index):
  // a walk goes on from the position after the last step staged into that
  // pipe (TakePositions), so a walk of one step does not rewrite the chunk
  // the peers read in the call before; and no rank copies its own data out
  // of a chunk that peers are reading. Both cost on the AMD EPYC Zen 4
  // host: in a model of a 1 MiB 2-rank allgather (two threads, one per
  // core, each staging 512 KiB, copying its own block and its peer's, p50
  // of 3000 calls), staging into the same buffer every call took 61-66 us
  // against 33-39 with two buffers in turn, and copying the own block out
  // of the stage instead of the input 77-78 us against 36-37. `choir perf
  // -n 2 --op allgather --algo shm_pipe`, 7 interleaved launches, median
  // busbw: 1-4 MiB 10.1-10.5 GB/s against 5.7-6.3 before; allreduce 512
  // KiB-4 MiB 1.05x-1.21x (docs/performance-log.md, "The pipe's own copies").
  std::vector<uint64_t> first_parity;
  uint64_t Parity(int owner, uint64_t k) const { return (first_parity[static_cast<size_t>(owner)] + k) & 1; }
};

// Sets walk.first_parity for a walk that stages into every local rank's
// pipe, or into `only_owner`'s alone (a broadcast's root), and counts its
// steps there. Called only where the walk then runs through the pipe (not
// for the kernel-copy or mapped-buffer walks), on every local rank alike.
void TakePositions(AreaOp& op, Walk& walk, int only_owner = -1) {
  walk.first_parity.assign(static_cast<size_t>(op.size()), 0);
  for (int q = 0; q < op.size(); ++q) {
    if (only_owner < 0 || q == only_owner) walk.first_parity[static_cast<size_t>(q)] = op.TakePipeSteps(q, walk.steps);
  }
}

// Whether `out` starts within the `span` bytes from `in`: a call in place
// (the output is the input, or this rank's slice of it; the Communicator
// refuses every other overlap). An output that ends inside the input
// without starting there is not one: the walk's outputs of a
// reduce_scatter are shorter than its input.
bool InPlace(const void* in, const void* out, size_t span) {
  const auto i = reinterpret_cast<uintptr_t>(in), o = reinterpret_cast<uintptr_t>(out);
  return o >= i && o < i + span;
}

// Checks that the pipe carries `blocks` and that every local rank runs this
// collective (the published addresses carry its signature, which is
// compared), and returns the walk. When every rank's `in` and `out` lie in
// SharedBuffers (op.AllShared(), the same answer on every rank), the ranks
// read each other's buffers directly instead (cma.cc's walks). Every rank
// must take the same branch after it: decide from op.peers(), which every
// rank sees alike, never from this rank's own arguments alone.
// `kind`: the collective the walk runs (a same-host step's own), which
// sets the size from which its outputs stream (PipeStreamingBytes).
// `table` and `tables`: numbers the ranks exchange along with the addresses
// (ExchangeAddresses).
Result<Walk> StartWalk(AreaOp& op, CollKind kind, const Blocks& blocks, size_t chunk, const void* in, void* out,
                       const std::vector<uint64_t>& table = {},
                       std::vector<std::vector<uint64_t>>* tables = nullptr) {
  const size_t es = op.ctx().elem_size();
  size_t most = 0;
  size_t total = 0;
  for (const Block& b : blocks) {
    most = std::max(most, b.count);
    total += b.count;
  }
  if (!PipeFits(op.pipe_bytes(), op.pipe_cache_bytes(), op.size(), es, most)) {
    return InternalError("shm_pipe chosen for blocks its pipe cannot carry");  // callers check PipeFits
  }
  // Two positions of one chunk (allgather, broadcast) or of n (PartAt).
  const size_t parts = kind == CollKind::kAllgather || kind == CollKind::kBroadcast ? 1 : op.size();
  if (chunk == 0 || 2 * parts * chunk * es > op.pipe_bytes()) {
    return InternalError("shm_pipe's chunks of " + std::to_string(chunk * es) + " bytes overrun its pipe of " +
                         std::to_string(op.pipe_bytes()));
  }
  CHOIR_RETURN_IF_ERROR(ExchangeAddresses(op, in, out, table, tables));
  const GroupView view = op.ctx().View();
  // The walks that combine or exchange blocks (parts > 1), run in place,
  // write their outputs over lines they have just read: streaming stores
  // there first evict those lines, and plain ones run faster. 2 ranks on
  // the Zen 4 host, in place, plain against streaming stores, paired
  // medians of 7 launches (allreduce: two passes of 9 and 7 launches with
  // streaming launched first; reduce_scatter: a pass in each launch
  // order): allreduce 1.56x-1.92x at 4-8 MiB, 1.13x-1.27x at 16
  // MiB, 0.99x-1.04x at 32-64 MiB; reduce_scatter (streaming from 8 MiB)
  // 1.60x-1.67x at 8 MiB, 1.13x-1.30x at 16 MiB, 0.99x-1.15x at 32-64 MiB;
  // alltoall 1.37x-1.69x at 8-16 MiB, 0.96x-1.09x at 4 and 32-64 MiB;
  // reduce 1.47x-1.49x at 4-8 MiB, 0.98x-1.10x at 16-64 MiB. 4 ranks on
  // the 2 cores: allreduce 1.22x at 4 MiB, 0.91x-1.10x at 16-64 MiB;
  // reduce_scatter 1.13x-1.42x at 4-64 MiB (docs/performance-log.md, "In
  // place"). Whether one rank's stores stream concerns it alone.
  const bool in_place = parts > 1 && in != nullptr && out != nullptr && InPlace(in, out, ElemsSpanned(blocks) * es);
  const bool streaming = !in_place && total * es >= PipeStreamingBytes(view.switch_table, kind, view.shares_cpus);
  return Walk{(most + chunk - 1) / chunk, streaming, op.AllShared(), false, view.shares_cpus, {}};
}

using Staging = SelectConfig::Staging;
using Stores = StagingChooser::Stores;

Staging StagingMode(const Context& c) {
  return c.select_config() != nullptr ? c.select_config()->staging : Staging::kPlain;
}

// The store kind of a walk that is not timed: CHOIR_SHM_STAGING's fixed
// kind, or under auto the host's home kind (streaming stores where the
// switch table says they come first, plain ones elsewhere).
Stores UntimedStores(const Context& c) {
  const Staging mode = StagingMode(c);
  if (mode != Staging::kAuto) return mode == Staging::kStreaming ? Stores::kStreaming : Stores::kPlain;
  const GroupView view = c.View();
  return StagingStreamsFirst(view.switch_table, view.shares_cpus) ? Stores::kStreaming : Stores::kPlain;
}

// Runs run(walk), a walk that stages into every local rank's pipe, from the
// positions TakePositions gives it, with the store kind of its staging as
// CHOIR_SHM_STAGING says: fixed, or (auto) from StagingChooser::kMinBytes
// of `bytes` (the whole buffer) on the communicator's StagingChooser's
// choice for `kind` and `bytes`, timed for it (smaller walks: UntimedStores).
template <typename Run>
Status RunStaged(AreaOp& op, CollKind kind, size_t bytes, Walk walk, Run&& run) {
  Context& c = op.ctx();
  TakePositions(op, walk);
  StagingChooser* chooser = c.staging_chooser();
  const bool choose = StagingMode(c) == Staging::kAuto && chooser != nullptr && bytes >= StagingChooser::kMinBytes;
  Stores stores = UntimedStores(c);
  if (choose) stores = chooser->Choose(kind, bytes, stores);
  walk.stage_streaming = stores == Stores::kStreaming;
  if (walk.stage_streaming) c.NoteStreamingStages();
  const int64_t start = choose ? OpNanos() : 0;
  Status s = run(walk);
  if (choose && s.ok()) chooser->Record(kind, bytes, stores, OpNanos() - start);
  return s;
}

size_t ChunkAt(const Block& slice, size_t k, size_t chunk) {
  const size_t start = k * chunk;
  return start >= slice.count ? 0 : std::min(chunk, slice.count - start);
}

// Where chunk `part` lies in local rank `owner`'s pipe at position `parity`
// (Walk::Parity) in the walks that stage one chunk per rank and step
// (reduce, alltoall): two positions of n chunks of `chunk_bytes`.
uint8_t* PartAt(const AreaOp& op, int owner, uint64_t parity, int part, size_t chunk_bytes) {
  return op.pipe(owner) + (parity * static_cast<size_t>(op.size()) + static_cast<size_t>(part)) * chunk_bytes;
}

// Step A of those walks: chunk k of this rank's input for every peer q's
// block, into part q of this rank's pipe.
void StageForPeers(const AreaOp& op, const uint8_t* in, const Blocks& blocks, uint64_t k, uint64_t parity, size_t chunk,
                   size_t es, bool streaming) {
  for (int q = 0; q < op.size(); ++q) {
    const Block& b = blocks[static_cast<size_t>(q)];
    const size_t m = ChunkAt(b, k, chunk);
    if (q == op.me() || m == 0) continue;
    kernels::CopyBytes(PartAt(op, op.me(), parity, q, chunk * es), in + (b.offset + k * chunk) * es, m * es, streaming);
  }
}

// The buffer (every slice) from which ReduceThroughPipe stores a result it
// stages in one pass with the rank's own output. On the AMD EPYC Zen 4
// host, 2 ranks, `choir perf --op allreduce`, against the stage then a
// copy out of it, medians of paired busbw ratios over 9 interleaved
// launches in each order: 1.09x-1.27x at 512 KiB-16 MiB and 1.07x-1.14x
// at 64 MiB, but 0.77x-0.94x at 64 KiB, 0.83x-1.01x at 128 KiB and
// 0.97x-1.04x at 256 KiB. With 4 ranks on its 2 cores 0.80x-0.89x at 1-16
// MiB and 1.18x at 64 MiB launched second (7 launches), 0.93x-1.04x at
// 1-64 MiB launched first (9): no gain, so ranks that share cores keep
// the copy. Other hosts were not measured
// (docs/performance-log.md, "One pass for the allreduce's result").
constexpr size_t kOnePassResultMinBytes = 512 * 1024;

// Who receives what of a reduction over the pipe.
enum class Output {
  kMySlice,      // reduce_scatter: each rank its slice, at `out`
  kWhole,        // allreduce: every rank the whole result, each slice at its offset
  kWholeOnRoot,  // reduce: the root the whole result; the others nothing
};

// The walk of PipeReduce through the pipe, in chunks of `chunk` elements.
Status ReduceThroughPipe(AreaOp& op, const uint8_t* in, uint8_t* out, const Blocks& slices, Output output, int root,
                         bool average, size_t chunk, const Walk& walk) {
  Context& c = op.ctx();
  const int n = op.size();
  const int me = op.me();
  const size_t es = c.elem_size();
  const size_t chunk_bytes = chunk * es;
  const bool streaming = walk.streaming;
  const Block& mine = slices[static_cast<size_t>(me)];
  // Whether this rank copies every peer's result, and where its own goes
  // (nowhere: a reduce's non-root).
  const bool gather = output == Output::kWhole || (output == Output::kWholeOnRoot && me == root);
  const bool staged = output != Output::kMySlice && !(output == Output::kWholeOnRoot && me == root);
  uint8_t* my_out = output == Output::kMySlice ? out : (gather ? out + mine.offset * es : nullptr);
  auto stage = [&](int owner, uint64_t k, int part) { return PartAt(op, owner, walk.Parity(owner, k), part, chunk_bytes); };
  // A result nobody else reads (reduce_scatter, a reduce's root), not
  // averaged apart afterwards and not overwriting input still to be staged, is
  // combined straight into the output: an output clear of the input, or
  // in place (a reduce_scatter's, a reduce root's) its own slice, which
  // only this rank reads (ReduceMany's output may be one of its sources).
  // A reduce root in place against combining into its pipe and copying
  // out, 2 ranks on the Zen 4 host, 512 KiB-16 MiB, paired medians of 7
  // launches: 1.03x-1.15x and 1.06x-1.16x in the two orders
  // (docs/performance-log.md, "In place").
  const uint8_t* in_end = in + ElemsSpanned(slices) * es;
  const auto at = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  const bool own_slice = my_out != nullptr && my_out == in + mine.offset * es;
  const int divisor = AverageDivisor(c, average);
  const bool divides_apart = DividesApart(c, average);
  const bool direct = !staged && !divides_apart &&
                      (own_slice || at(my_out + mine.count * es) <= at(in) || at(my_out) >= at(in_end));
  // The staged result with streaming stores only when peers read it and
  // nothing rewrites it here first (a division apart would bring it back).
  const bool stream_result = walk.stage_streaming && staged && !divides_apart;
  // A result staged for the peers and written to this rank's output is
  // stored to both in one pass (ReduceManyTwice), as the allgather's stage
  // and own copy are (GatherThroughPipe), where the ranks have a core each,
  // nothing rewrites the result in between (a division apart) and the
  // buffer is at least kOnePassResultMinBytes.
  const bool one_pass = staged && !walk.shares_cpus && !divides_apart &&
                        ElemsSpanned(slices) * es >= kOnePassResultMinBytes;
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (uint64_t k = 0; k < walk.steps; ++k) {
    if (k >= 2) CHOIR_RETURN_IF_ERROR(op.WaitConsumedByAll(k - 1));
    // A. my input for every peer's slice.
    StageForPeers(op, in, slices, k, walk.Parity(me, k), chunk, es, walk.stage_streaming);
    op.SetProgress(2 * k + 1);
    // B. my slice.
    const size_t m = ChunkAt(mine, k, chunk);
    for (int p = 0; p < n; ++p) {
      if (p == me) {
        srcs[static_cast<size_t>(p)] = in + (mine.offset + k * chunk) * es;
        continue;
      }
      CHOIR_RETURN_IF_ERROR(op.WaitProgress(p, 2 * k + 1));
      srcs[static_cast<size_t>(p)] = stage(p, k, me);
      c.CountSharedRead(p, m * es);
    }
    if (direct) {
      if (m > 0) {
        kernels::ReduceMany(my_out + k * chunk * es, srcs.data(), n, m, c.dtype(), c.op(), streaming, divisor);
      }
    } else {
      uint8_t* result = stage(me, k, me);
      uint8_t* own = my_out != nullptr ? my_out + k * chunk * es : nullptr;
      if (m > 0 && own != nullptr && one_pass &&
          kernels::ReduceManyTwiceFuses(result, stream_result, own, streaming, m, c.dtype(), c.op(), divisor)) {
        kernels::ReduceManyTwice(result, stream_result, own, streaming, srcs.data(), n, m, c.dtype(), c.op(),
                                 divisor);
      } else {
        if (m > 0) {
          kernels::ReduceMany(result, srcs.data(), n, m, c.dtype(), c.op(), stream_result, divisor);
          if (divides_apart) FinishAverage(c, result, m);
        }
        // This rank's own copy of its result goes before the peers may
        // read it: copying it out while they read the same lines ran
        // slower (Walk::first_parity says where this was measured).
        if (m > 0 && own != nullptr) kernels::CopyBytes(own, result, m * es, streaming);
      }
      op.SetProgress(2 * k + 2);
    }
    // C. every peer's result.
    if (gather) {
      for (int s = 1; s < n; ++s) {
        const int q = (me + s) % n;
        const Block& b = slices[static_cast<size_t>(q)];
        const size_t mq = ChunkAt(b, k, chunk);
        CHOIR_RETURN_IF_ERROR(op.WaitProgress(q, 2 * k + 2));
        if (mq == 0) continue;
        kernels::CopyBytes(out + (b.offset + k * chunk) * es, stage(q, k, q), mq * es, streaming);
        c.CountSharedRead(q, mq * es);
      }
    }
    op.SetConsumed(k + 1);
  }
  // Every peer has read this rank's pipe before the next operation reuses it.
  return op.Finish();
}

// The combination of every rank's `in` over `slices`, each rank combining
// its own slice, delivered as `output` says. `average` finishes
// ReduceOp::kAvg (the hierarchical steps average once at their end instead).
Status PipeReduce(Context& c, const uint8_t* in, uint8_t* out, const Blocks& slices, Output output, int root,
                  bool average) {
  AreaOp op(c);
  const size_t es = c.elem_size();
  const CollKind kind = output == Output::kMySlice ? CollKind::kReduceScatter
                        : output == Output::kWhole  ? CollKind::kAllreduce
                                                    : CollKind::kReduce;
  // A reduce_scatter that combines into its output (not averaging apart)
  // stages only the n-1 chunks for its peers, and only those share the L2:
  // with 2 ranks on the Zen 4 host (1 MiB of L2), chunks of 512 KiB
  // instead of 256 ran 1-16 MiB reduce_scatters up to 1.32x faster (paired
  // medians) and 64-256 MiB ones level. Where ranks share CPUs, two share
  // an L2, and the larger chunks ran up to 2.6x slower (3 and 4 ranks on 2
  // cores): there a step's share stays that of n chunks (docs/algorithms.md
  // on the pipe's chunks; docs/performance-log.md, "Chunks for what a step
  // stages"). Decided alike on every rank, as the chunk lays out every
  // pipe: from the kind, the operation and the sharing of CPUs, not from
  // whether this rank's output overlaps its input (`direct` in
  // ReduceThroughPipe; in place, on its own slice, it combines there too).
  // Other hosts and groups of more than 2 ranks with a core each were not
  // measured.
  const bool peers_only = kind == CollKind::kReduceScatter && !DividesApart(c, average) && !op.ranks_share_cpus();
  const size_t chunk = PipeChunkElems(op.pipe_bytes(), op.pipe_cache_bytes(), op.size(), es, peers_only);
  CHOIR_ASSIGN_OR_RETURN(const Walk walk, StartWalk(op, kind, slices, chunk, in, out));
  if (output == Output::kWholeOnRoot) {
    // A reduce reads every input and writes the root's output only (the
    // other ranks' may be null): those in SharedBuffers suffice.
    if (!average) return InternalError("a pipe reduce always finishes kAvg");  // ReduceCmaWith does
    if (op.ReduceShared(root)) return ReduceCmaWith(op, in, out, ElemsSpanned(slices), root);
  } else if (walk.shared) {
    return CmaReduceWith(op, in, out, slices, output == Output::kWhole, average);
  }
  return RunStaged(op, kind, ElemsSpanned(slices) * es, walk, [&](const Walk& w) {
    return ReduceThroughPipe(op, in, out, slices, output, root, average, chunk, w);
  });
}

// Allgather through the pipe: every rank's block of `buf` (this rank's read
// from `own`) into every rank's `buf`, one chunk per step: each rank stages
// chunk k of its block in its pipe (progress k+1) and copies chunk k of
// every peer's block out of theirs.
Status GatherThroughPipe(AreaOp& op, const uint8_t* own, uint8_t* buf, const Blocks& blocks, size_t chunk,
                         const Walk& walk) {
  Context& c = op.ctx();
  const int n = op.size();
  const int me = op.me();
  const size_t es = c.elem_size();
  const bool streaming = walk.streaming;
  const Block& mine = blocks[static_cast<size_t>(me)];
  auto stage = [&](int owner, uint64_t k) { return op.pipe(owner) + walk.Parity(owner, k) * chunk * es; };
  for (uint64_t k = 0; k < walk.steps; ++k) {
    if (k >= 2) CHOIR_RETURN_IF_ERROR(op.WaitConsumedByAll(k - 1));
    const size_t m = ChunkAt(mine, k, chunk);
    const uint8_t* src = own + k * chunk * es;
    uint8_t* dst = buf + (mine.offset + k * chunk) * es;
    // The own output comes from the input, never from the stage the peers
    // are reading at the same moment (Walk::first_parity says what that
    // cost). With a core per rank, the stage and the own output are written
    // in one pass over the input (CopyBytesTwice), before the peers may read
    // the stage. On the Zen 4 host, 2 ranks, against a copy for each with
    // the own one after the progress, as built: 1.08x-1.17x at 1-256 MiB
    // (medians of paired ratios, 11 interleaved launches; 0.93x-1.19x and
    // 1.02x-1.16x in the other launch order, 11 and 15 launches). With 4
    // ranks on its 2 cores it ran 0.79x-0.97x at 1-8 MiB, likely because
    // the later progress kept the peers waiting, so ranks that share cores
    // keep the two copies, as do copies CopyBytesTwice would not make in
    // one pass. Other hosts were not measured (docs/performance-log.md,
    // "One read for two copies").
    const bool once = m > 0 && dst != src && !walk.shares_cpus &&
                      kernels::CopyBytesTwiceFuses(stage(me, k), walk.stage_streaming, dst, streaming, m * es);
    if (once) {
      kernels::CopyBytesTwice(stage(me, k), walk.stage_streaming, dst, streaming, src, m * es);
    } else if (m > 0) {
      kernels::CopyBytes(stage(me, k), src, m * es, walk.stage_streaming);
    }
    op.SetProgress(k + 1);
    if (!once && m > 0 && dst != src) kernels::CopyBytes(dst, src, m * es, streaming);
    for (int s = 1; s < n; ++s) {
      const int q = (me + s) % n;
      const Block& b = blocks[static_cast<size_t>(q)];
      const size_t mq = ChunkAt(b, k, chunk);
      CHOIR_RETURN_IF_ERROR(op.WaitProgress(q, k + 1));
      if (mq == 0) continue;
      kernels::CopyBytes(buf + (b.offset + k * chunk) * es, stage(q, k), mq * es, streaming);
      c.CountSharedRead(q, mq * es);
    }
    op.SetConsumed(k + 1);
  }
  return op.Finish();
}

// The chooser for a user's allgather or alltoall (`adaptive`) of `bytes`
// when it may take the kernel copy instead of the pipe, else null: then no
// numbers are exchanged either (they always fit: a slot holds at least 4
// KiB). Every rank gets the same answer: the same sizes, the same
// group-wide cma verdict.
WalkChooser* ChooserFor(const Context& c, bool adaptive, size_t bytes) {
  if (!adaptive || !c.local_group()->cma || bytes < WalkChooser::kMinBytes) return nullptr;
  return c.walk_chooser();
}

// Whether this rank takes part in the choice (CHOIR_SHM_ADAPT=1). A rank
// that does not still publishes its table (saying so), and every rank then
// keeps the pipe; it skips choosing and timing, which changes nothing since
// its setting holds for the communicator's life.
bool AdaptsHere(const Context& c) { return c.select_config() != nullptr && c.select_config()->adapt_walks; }

// Runs the walk every rank chooses from the exchanged `tables`, `pipe` or
// `kernel`, timed for the chooser; the kernel copy shows as "+cma" after the
// algorithm's name.
template <typename Pipe, typename Kernel>
Status RunChosenWalk(Context& c, WalkChooser& chooser, CollKind kind, size_t bytes,
                     const std::vector<std::vector<uint64_t>>& tables, Pipe&& pipe, Kernel&& kernel) {
  const WalkChooser::Walk walk = chooser.Choose(kind, bytes, tables);
  if (walk == WalkChooser::Walk::kKernel) c.NoteKernelWalk();
  const int64_t t0 = OpNanos();
  Status s = walk == WalkChooser::Walk::kKernel ? kernel() : pipe();
  if (s.ok()) chooser.Record(kind, bytes, walk, OpNanos() - t0);
  return s;
}

std::vector<uint64_t> TableFor(const Context& c, WalkChooser* chooser, CollKind kind, size_t bytes) {
  if (chooser == nullptr) return {};
  return chooser->Table(kind, bytes, AdaptsHere(c));
}

// Allgather of `blocks` (own: this rank's block): through the pipe, or, with
// every buffer in SharedBuffers, cma's walk over the mapped buffers. With
// `adaptive` (a user's allgather, not a step of another collective) the
// ranks may take cma's kernel-copy walk instead when it measured faster
// (walk_choice.h).
Status PipeGather(Context& c, const uint8_t* own, uint8_t* buf, const Blocks& blocks, bool adaptive = false) {
  AreaOp op(c);
  const size_t es = c.elem_size();
  const size_t chunk = ChunkBytes(op.pipe_bytes(), op.pipe_cache_bytes(), 1) / es;  // one chunk per step
  const size_t bytes = ElemsSpanned(blocks) * es;
  WalkChooser* chooser = ChooserFor(c, adaptive, bytes);
  std::vector<std::vector<uint64_t>> tables;
  CHOIR_ASSIGN_OR_RETURN(const Walk walk,
                         StartWalk(op, CollKind::kAllgather, blocks, chunk, own, buf,
                                   TableFor(c, chooser, CollKind::kAllgather, bytes),
                                   &tables));
  if (walk.shared) return CmaAllgatherWith(op, own, buf, blocks);
  const auto pipe = [&] {
    return RunStaged(op, CollKind::kAllgather, bytes, walk,
                     [&](const Walk& w) { return GatherThroughPipe(op, own, buf, blocks, chunk, w); });
  };
  if (chooser == nullptr || !AdaptsHere(c)) return pipe();
  return RunChosenWalk(
      c, *chooser, CollKind::kAllgather, bytes, tables, pipe,
      [&] { return CmaAllgatherWith(op, own, buf, blocks); });
}

// Alltoall with each rank copying its blocks straight out of its peers'
// inputs: mapped SharedBuffers or process_vm_readv. Not in place.
Status AlltoallFromPeers(AreaOp& op, const uint8_t* in, uint8_t* out, const Blocks& blocks) {
  const int n = op.size();
  const int me = op.me();
  const size_t es = op.ctx().elem_size();
  const Block& mine = blocks[static_cast<size_t>(me)];
  CopyIfDistinct(out + mine.offset * es, in + mine.offset * es, mine.count * es);
  for (int s = 1; s < n; ++s) {
    const int p = (me + s) % n;
    const Block& b = blocks[static_cast<size_t>(p)];
    CHOIR_RETURN_IF_ERROR(CopyFromPeer(op, p, out + b.offset * es,
                                       op.peers()[static_cast<size_t>(p)].send + mine.offset * es, b.count * es));
  }
  return op.Finish();
}

// Alltoall through the pipe: in step k a rank stages chunk k of its block
// for every peer (part q of its pipe), copies chunk k of its own block, then
// copies chunk k of the block each peer staged for it. In place works
// unchanged: a rank overwrites chunk k of a block only after it staged it.
Status AlltoallThroughPipe(AreaOp& op, const uint8_t* in, uint8_t* out, const Blocks& blocks, size_t chunk,
                           const Walk& walk) {
  Context& c = op.ctx();
  const int n = op.size();
  const int me = op.me();
  const size_t es = c.elem_size();
  const size_t chunk_bytes = chunk * es;
  const Block& mine = blocks[static_cast<size_t>(me)];
  for (uint64_t k = 0; k < walk.steps; ++k) {
    if (k >= 2) CHOIR_RETURN_IF_ERROR(op.WaitConsumedByAll(k - 1));
    StageForPeers(op, in, blocks, k, walk.Parity(me, k), chunk, es, walk.stage_streaming);
    op.SetProgress(k + 1);
    if (const size_t m = ChunkAt(mine, k, chunk); m > 0 && in != out) {
      kernels::CopyBytes(out + (mine.offset + k * chunk) * es, in + (mine.offset + k * chunk) * es, m * es,
                         walk.streaming);
    }
    for (int s = 1; s < n; ++s) {
      const int q = (me + s) % n;
      const Block& b = blocks[static_cast<size_t>(q)];
      const size_t mq = ChunkAt(b, k, chunk);
      CHOIR_RETURN_IF_ERROR(op.WaitProgress(q, k + 1));
      if (mq == 0) continue;
      kernels::CopyBytes(out + (b.offset + k * chunk) * es, PartAt(op, q, walk.Parity(q, k), me, chunk_bytes), mq * es,
                         walk.streaming);
      c.CountSharedRead(q, mq * es);
    }
    op.SetConsumed(k + 1);
  }
  return op.Finish();
}

// Alltoall (equal blocks): through the pipe, or with every rank's buffers
// in SharedBuffers (none in place) straight out of the peers' inputs. With
// heap buffers (none in place) the ranks may take that walk through
// process_vm_readv instead when it measured faster (walk_choice.h).
Status PipeAlltoall(Context& c, const uint8_t* in, uint8_t* out, const Blocks& blocks) {
  AreaOp op(c);
  const size_t es = c.elem_size();
  // A step stages the n-1 chunks for the peers (its own block goes straight
  // to its output): the L2 share of those, as a reduce_scatter's, where every
  // rank has a core. 2 ranks on the Zen 4 host, 1-256 MiB: 1.00x-1.14x in
  // paired medians of three passes, 0.87x-1.16x in one with slow spells
  // (docs/performance-log.md, "The alltoall's chunks likewise").
  const size_t chunk =
      PipeChunkElems(op.pipe_bytes(), op.pipe_cache_bytes(), op.size(), es, !op.ranks_share_cpus());
  const size_t bytes = ElemsSpanned(blocks) * es;
  WalkChooser* chooser = ChooserFor(c, /*adaptive=*/true, bytes);
  std::vector<std::vector<uint64_t>> tables;
  CHOIR_ASSIGN_OR_RETURN(const Walk walk,
                         StartWalk(op, CollKind::kAlltoall, blocks, chunk, in, out,
                                   TableFor(c, chooser, CollKind::kAlltoall, bytes),
                                   &tables));
  // Straight out of the peers' inputs only when no rank runs in place (its
  // input would change under the readers): the same answer on every rank.
  const bool none_in_place = !op.AnyInPlace();
  if (walk.shared && none_in_place) return AlltoallFromPeers(op, in, out, blocks);
  const auto pipe = [&] {
    return RunStaged(op, CollKind::kAlltoall, bytes, walk,
                     [&](const Walk& w) { return AlltoallThroughPipe(op, in, out, blocks, chunk, w); });
  };
  if (chooser == nullptr || !AdaptsHere(c) || !none_in_place) return pipe();
  return RunChosenWalk(
      c, *chooser, CollKind::kAlltoall, bytes, tables, pipe,
      [&] { return AlltoallFromPeers(op, in, out, blocks); });
}

}  // namespace

// Broadcast: in step k the root stages chunk k of its buffer in its pipe
// (and copies it to its own output when that is another buffer); every
// other rank copies it out of the root's pipe. With the root's input and
// every output in SharedBuffers, cma's walk over the mapped buffers instead.
Status BroadcastPipe(Context& c, const OpArgs& a) {
  AreaOp op(c);
  const int root = a.root;
  const bool is_root = op.me() == root;
  const size_t es = c.elem_size();
  const size_t chunk = ChunkBytes(op.pipe_bytes(), op.pipe_cache_bytes(), 1) / es;  // one chunk per step
  const Block whole{0, a.count};
  CHOIR_ASSIGN_OR_RETURN(Walk walk,
                         StartWalk(op, CollKind::kBroadcast, {whole}, chunk, is_root ? a.send : nullptr, a.recv));
  if (op.peers()[static_cast<size_t>(root)].send_ref.id != 0 && op.EveryRankShares(&PeerBuffers::recv_ref)) {
    return BroadcastCmaWith(op, a);
  }
  TakePositions(op, walk, root);  // only the root's pipe is staged into
  const auto* src = static_cast<const uint8_t*>(a.send);
  auto* dst = static_cast<uint8_t*>(a.recv);
  const bool streaming = walk.streaming;
  // Large broadcasts stage with streaming stores: the receivers then read
  // the chunks from memory instead of out of the root's cache, which an
  // earlier host ran 1.1-2.5x slower. Smaller ones stage as untimed walks
  // do (UntimedStores; the root's walk is not timed: its time would be
  // mostly its receivers'). That is streaming on the Zen 5 table with a
  // core per rank, where it ran 1.26x-3.12x faster than plain stores at
  // 128 KiB-2 MiB (docs/algorithms.md, "The pipe's store kind").
  const bool stage_streaming = streaming || UntimedStores(c) == Stores::kStreaming;
  if (is_root && stage_streaming) c.NoteStreamingStages();
  for (uint64_t k = 0; k < walk.steps; ++k) {
    const size_t m = ChunkAt(whole, k, chunk);
    uint8_t* stage = op.pipe(root) + walk.Parity(root, k) * chunk * es;
    if (is_root) {
      if (k >= 2) CHOIR_RETURN_IF_ERROR(op.WaitConsumedByAll(k - 1));
      kernels::CopyBytes(stage, src + k * chunk * es, m * es, /*nontemporal=*/stage_streaming);
      op.SetProgress(k + 1);
      if (src != dst) kernels::CopyBytes(dst + k * chunk * es, src + k * chunk * es, m * es, streaming);
    } else {
      CHOIR_RETURN_IF_ERROR(op.WaitProgress(root, k + 1));
      kernels::CopyBytes(dst + k * chunk * es, stage, m * es, streaming);
      c.CountSharedRead(root, m * es);
    }
    op.SetConsumed(k + 1);
  }
  return op.Finish();
}

Status PipeReduceScatterBlocks(Context& c, const uint8_t* in, uint8_t* my_out, const Blocks& blocks) {
  return PipeReduce(c, in, my_out, blocks, Output::kMySlice, /*root=*/-1, /*average=*/false);
}

Status PipeAllgatherBlocks(Context& c, uint8_t* buf, const Blocks& blocks) {
  const Block& mine = blocks[static_cast<size_t>(c.rank())];
  return PipeGather(c, buf + mine.offset * c.elem_size(), buf, blocks);
}

Status AllgatherPipe(Context& c, const OpArgs& a) {
  const Blocks blocks = patterns::BlocksFromCounts(a.RecvCounts(c.size()));
  return PipeGather(c, static_cast<const uint8_t*>(a.send), static_cast<uint8_t*>(a.recv), blocks,
                    /*adaptive=*/true);
}

Status AllreducePipe(Context& c, const OpArgs& a) {
  return PipeReduce(c, static_cast<const uint8_t*>(a.send), static_cast<uint8_t*>(a.recv),
                    EvenBlocks(a.count, c.size()), Output::kWhole, /*root=*/-1, /*average=*/true);
}

Status AlltoallPipe(Context& c, const OpArgs& a) {
  return PipeAlltoall(c, static_cast<const uint8_t*>(a.send), static_cast<uint8_t*>(a.recv),
                      patterns::BlocksFromCounts(a.SendCounts(c.size())));
}

Status ReducePipe(Context& c, const OpArgs& a) {
  return PipeReduce(c, static_cast<const uint8_t*>(a.send), static_cast<uint8_t*>(a.recv),
                    EvenBlocks(a.count, c.size()), Output::kWholeOnRoot, a.root, /*average=*/true);
}

Status ReduceScatterPipe(Context& c, const OpArgs& a) {
  const int n = c.size();
  return PipeReduce(c, static_cast<const uint8_t*>(a.send), static_cast<uint8_t*>(a.recv),
                    EvenBlocks(a.count * static_cast<size_t>(n), n), Output::kMySlice, /*root=*/-1,
                    /*average=*/true);
}

size_t PipeChunkElems(size_t pipe_bytes, size_t cache_bytes, int n, size_t es, bool peers_only) {
  const size_t parts = static_cast<size_t>(n);
  const size_t cached = peers_only && n >= 2 ? parts - 1 : parts;
  return ChunkBytes(pipe_bytes, cache_bytes, parts, cached) / es;
}

bool PipeFits(size_t pipe_bytes, size_t cache_bytes, int n, size_t es, size_t largest_block) {
  const size_t chunk = PipeChunkElems(pipe_bytes, cache_bytes, n, es);
  if (chunk == 0) return false;
  // Progress counts 2 per step in 24 bits.
  const size_t steps = (largest_block + chunk - 1) / chunk;
  return 2 * steps + 2 < (size_t{1} << 24);
}

bool PipeUsable(const GroupView& g, const OpArgs& a) {
  if (!g.same_host) return false;
  const size_t es = a.elem_size();
  const size_t total = a.SelectionBytes(g.size) / es;
  // A broadcast walks the whole buffer; the others a block per rank.
  const size_t largest = a.kind == CollKind::kBroadcast ? total : total / static_cast<size_t>(g.size) + 1;
  // Whether the pipe is preferred for this size: switch_points.cc.
  return PipeFits(g.pipe_bytes, g.pipe_cache_bytes, g.size, es, largest);
}

}  // namespace choir::algorithms
