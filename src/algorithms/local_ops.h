// Building blocks of the same-host algorithms (shm_flat.cc, cma.cc): one
// "area operation" on the host's shared slots, as every local rank runs it.
//
//   AreaOp op(ctx, payload);        // next id, its slot (the ring the payload fits)
//   op.Acquire();                   // my slot is no longer being read by anyone
//   memcpy(op.my_data(), ...);      // fill it
//   op.Publish(bytes);              // id + signature become visible to peers
//   op.WaitAll() / op.WaitFor(p);   // peers' slots of this id (signatures checked)
//   ... read op.data(p) ...
//   op.FinishReads();               // peers may reuse their slots
//
// Large (CMA) operations publish buffer addresses instead of data, advance a
// per-rank progress counter while they work, and end with Finish(), which
// returns only when every peer has stopped reading this rank's buffers.
//
// Thread-safety: used by the thread running the operation.
#ifndef CHOIR_ALGORITHMS_LOCAL_OPS_H_
#define CHOIR_ALGORITHMS_LOCAL_OPS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/context.h"
#include "transport/shm/local_group.h"

namespace choir::algorithms {

// True when the context covers exactly this host's local group (every rank of
// the communicator is local), which the same-host algorithms require.
bool LocalGroupUsable(const Context& c);

// Addresses of a rank's user buffers, as published in its slot, and the
// SharedBuffers they lie in (id 0: ordinary memory).
struct PeerBuffers {
  uint64_t send = 0;
  uint64_t recv = 0;
  transport::SharedRef send_ref;
  transport::SharedRef recv_ref;
};

class AreaOp {
 public:
  // `payload`: the most any rank will publish in its slot; up to
  // transport::kSmallSlotPayload the operation takes the deep ring of small
  // slots, up to kMediumSlotPayload the deep ring of medium ones
  // (transport::RingFor). Every rank must pass a value that leads to the same
  // ring (derive it from the collective's arguments). The default takes a
  // full slot.
  static constexpr size_t kFullSlot = SIZE_MAX;
  explicit AreaOp(Context& c, size_t payload = kFullSlot);

  Status Acquire();
  uint8_t* my_data() const { return data_of(group_->index); }
  size_t slot_capacity() const {
    return ring_ == transport::Ring::kSmall    ? transport::kSmallSlotPayload
           : ring_ == transport::Ring::kMedium ? transport::kMediumSlotPayload
                                               : group_->mine().slot_capacity();
  }
  // `peers_read`: false when no peer reads this slot's payload (an in-place
  // reduce root's): this rank then only reads from peers that do not wait
  // for it, and fetches their next slots as such a reader (next_lines_).
  void Publish(uint64_t bytes, bool peers_read = true);
  // Both count the slot traffic on this (reading) side: the whole payload, or
  // `reads` bytes of each slot when the rank reads only its block of it.
  static constexpr uint64_t kWholeSlot = UINT64_MAX;
  Status WaitFor(int local_index, uint64_t reads = kWholeSlot);
  Status WaitAll(uint64_t reads = kWholeSlot);
  // Allreduces of up to kLinesMaxBytes (less on some hosts:
  // AllreduceLinesMaxBytes) travel in flagged lines instead of the slot's
  // payload (PublishLines, WaitLines, ReadLines): the header goes
  // first, then each of the slot's lines after the header's carries
  // kLinePayload bytes and, written after them, a flag word naming the
  // operation. A reader polls every line at once, so no line is fetched
  // after another (NCCL's LL protocols have the idea). On the Zen 5 VM,
  // median p50 of interleaved launches against the slot's payload, over
  // three passes: 8 B-1 KiB 0.67x-0.88x of the time; 2 KiB 1.16x and 4 KiB
  // 1.11x, hence the bound (docs/performance-log.md, "Flagged lines").
  static constexpr size_t kLinePayload = 56;
  static constexpr uint64_t kLinesMaxBytes = 1024;
  static bool LinesFit(uint64_t bytes) { return bytes > 0 && bytes <= kLinesMaxBytes; }
  static constexpr size_t LinesOf(uint64_t bytes) {
    return static_cast<size_t>((bytes + kLinePayload - 1) / kLinePayload);
  }
  // The slot space `blocks` blocks of `bytes` take in lines, each block
  // from a line of its own (what AreaOp's `payload` asks for: from 393
  // bytes of payload on they take a medium slot).
  static constexpr size_t LineLayoutBytes(uint64_t bytes, int blocks = 1) {
    return 32 + 64 * static_cast<size_t>(blocks) * LinesOf(bytes);
  }
  void PublishLines(const void* src, uint64_t bytes);
  // An allgather's and a reduce_scatter's blocks travel in lines when each
  // takes 2 to 5 of them (57-280 bytes; a reduce_scatter's only up to its
  // host table's ReduceScatterLinesMaxBlock) and all `blocks` a rank writes
  // fit any full slot (one for an allgather, the ranks' for a reduce_scatter):
  // every block starts a line of its own (block b at line b *
  // LinesOf(block)), so that a reader polls and reads only the lines of the
  // block it wants of each peer. On the Zen 5 VM, 2 ranks, median mean time
  // of 6 interleaved launches against the slots', in two passes, at blocks
  // of 64-256 bytes: allgather 0.90x-0.96x (0.99x-1.08x at 8-32,
  // 1.15x-1.36x at 512-1024), reduce_scatter 0.84x-0.94x (1.10x-1.14x at
  // 8-16, 1.02x at 512). An alltoall's, measured once the same way,
  // 0.93x-1.02x: it keeps the slots (docs/performance-log.md, "The fourth
  // session on the Zen 5 host").
  static bool BlockLinesFit(uint64_t block, int blocks) {
    return block > kLinePayload && block <= 5 * kLinePayload &&
           LineLayoutBytes(block, blocks) <= transport::kSlotMinCapacity;
  }
  // Publishes the size() blocks of `block` bytes at `src` in lines, each
  // from the line LinesOf(block) times its index on, all but block `skip`
  // (this rank's own, which no peer reads).
  void PublishBlockLines(const void* src, uint64_t block, int skip);
  // Waits for the lines of every peer that hold `bytes` from line
  // `first_line` on. Their flags carry the signature and the history
  // (LineFlag in local_ops.cc): a peer's header is read only while
  // waiting, to tell a mismatch from a late peer.
  Status WaitLines(uint64_t bytes, size_t first_line = 0);
  void ReadLines(int local_index, void* dst, uint64_t bytes, size_t first_line = 0) const;
  const uint8_t* data(int local_index) const { return data_of(local_index); }
  uint64_t bytes(int local_index) const { return header(local_index)->bytes; }
  void FinishReads();

  // Large operations.
  void SetProgress(uint64_t chunks_done);
  Status WaitProgress(int local_index, uint64_t chunks);
  // Marks this rank done and waits until every peer is done too.
  Status Finish();

  // Pipelined operations (shm_pipe): each rank's pipe, and how many steps'
  // worth of its peers' pipes a rank has finished reading.
  uint8_t* pipe(int local_index) const { return group_->areas[static_cast<size_t>(local_index)].pipe(); }
  size_t pipe_bytes() const { return group_->mine().pipe_bytes(); }
  size_t pipe_cache_bytes() const { return group_->pipe_cache_bytes; }  // bounds the chunks (ChunkBytes)
  bool ranks_share_cpus() const { return group_->ranks_share_cpus; }   // the same on every local rank
  // The position (0 or 1) at which a walk of `steps` steps that stages into
  // local rank `owner`'s pipe starts, counting those steps for the next one
  // (local_group.h: pipe_steps). Every local rank must take the same steps
  // for the same owners.
  uint64_t TakePipeSteps(int owner, uint64_t steps) {
    uint64_t& taken = group_->pipe_steps[static_cast<size_t>(owner)];
    const uint64_t first = taken & 1;
    taken += steps;
    return first;
  }
  void SetConsumed(uint64_t steps);
  Status WaitConsumedByAll(uint64_t steps);

  // Buffers every rank published (ExchangeAddresses).
  const std::vector<PeerBuffers>& peers() const { return peers_; }
  // Where `bytes` at `remote` in local rank p's memory can be reached with
  // plain loads and stores: inside a SharedBuffer p published, mapped here;
  // null when they are ordinary memory (use process_vm_readv/writev).
  Result<uint8_t*> Reach(int local_index, uint64_t remote, size_t bytes);
  // True when every rank published send and receive buffers inside
  // SharedBuffers and this host allows mapping them.
  bool AllShared() const;
  // Whether every rank's buffer `ref` (&PeerBuffers::send_ref or recv_ref)
  // lies in a SharedBuffer: the same answer on every rank.
  bool EveryRankShares(transport::SharedRef PeerBuffers::*ref) const;
  // True when a reduce to local rank `root` reaches every buffer it touches
  // through mappings: every rank's input and the root's output lie in
  // SharedBuffers (the other ranks' outputs are not touched). The same
  // answer on every rank.
  bool ReduceShared(int root) const;
  // Whether any rank published the same send and receive buffer (a call in
  // place): the same answer on every rank.
  bool AnyInPlace() const;

  int me() const { return group_->index; }
  int size() const { return group_->size(); }
  int pid(int local_index) const { return group_->pids[static_cast<size_t>(local_index)]; }
  uint64_t id() const { return id_; }
  Context& ctx() const { return *ctx_; }

 private:
  // Waits until no local peer owes(p) anything; `to_do` ends the timeout
  // message ("rank 3, rank 5 <to_do>"). `marks_data`: peers' data arrives
  // (Endpoint::WaitLocal, the late-arrival metric).
  Status Wait(absl::FunctionRef<bool(int local_index)> owes, const char* to_do, bool marks_data = false);
  // The signature in `h` (local rank p's slot) against this collective's.
  Status CheckSignature(int local_index, const transport::SlotHeader* h) const;
  // This operation's slot of local rank p, and the slot with the same id in
  // another ring (where a rank that called another collective published).
  transport::SlotHeader* header(int local_index) const {
    return group_->areas[static_cast<size_t>(local_index)].ring_slot(ring_, slot_);
  }
  const transport::SlotHeader* ring_header(int local_index, transport::Ring r) const {
    return group_->areas[static_cast<size_t>(local_index)].ring_slot(
        r, static_cast<int>(id_ & static_cast<uint64_t>(transport::RingDepth(r) - 1)));
  }
  uint8_t* data_of(int local_index) const {
    return group_->areas[static_cast<size_t>(local_index)].ring_data(ring_, slot_);
  }
  // The header of local rank p's publication of this id in another ring (it
  // runs another collective: CheckSignature then names it), or null.
  const transport::SlotHeader* OtherRingHeader(int local_index) const;
  bool InOtherRing(int local_index) const { return OtherRingHeader(local_index) != nullptr; }
  Status OtherRingMismatch(int local_index) const;
  // Writes this rank's slot header for this operation, id last (Publish,
  // PublishLines).
  transport::SlotHeader* WriteHeader(uint64_t bytes, bool peers_read = true);
  // After every peer published: checks their signatures and counts `reads`
  // bytes (at most each one's payload) read from each (WaitAll, WaitLines).
  Status ReadFromAll(uint64_t reads);
  // What ReadFromAll records of a read from every peer, without the checks.
  void MarkReadFromAll();
  // True when every peer has published this id here: a peer that runs ahead
  // has, and then the wait is not set up at all (the small-call path).
  bool AllPublished() const;

  Context* ctx_;
  transport::LocalGroup* group_;
  uint64_t id_;
  transport::Ring ring_;
  bool small() const { return ring_ == transport::Ring::kSmall; }
  int depth_;  // slots in this operation's ring
  // The slot of operation `id` in this operation's ring: a mask, not a
  // division (tens of cycles on the small-message path).
  static_assert((transport::kSmallSlots & (transport::kSmallSlots - 1)) == 0 &&
                (transport::kMediumSlots & (transport::kMediumSlots - 1)) == 0 &&
                (transport::kAreaSlots & (transport::kAreaSlots - 1)) == 0);
  int SlotOf(uint64_t id) const { return static_cast<int>(id & static_cast<uint64_t>(depth_ - 1)); }
  int slot_;
  uint32_t history_;  // SlotHeader::history this rank publishes, and expects of its peers
  // SignatureHash of this operation's signature after history_: the next
  // history, and the mix of the lines' flags.
  uint64_t mix_;
  // The flag this rank's lines carry in this operation (LineFlag).
  uint64_t OwnFlag();
  // Whose slots this operation read: kReadNone, kReadAll or one local index
  // (FinishReads prefetches those peers' next slots, and only those).
  static constexpr int kReadNone = -1;
  static constexpr int kReadAll = -2;
  int read_from_ = kReadNone;
  // Lines of a peer's next slot FinishReads fetches. A rank that publishes
  // no data of its own (a broadcast's receivers, a reduce's root) reads
  // from a peer that does not wait for it and so has often written its next
  // slot already: both lines of a payload that spills past its header's
  // line, when it ends in the second (the next call is assumed alike). In
  // an exchange the peer writes its next slot only after this rank's data
  // arrived, and fetching lines it is about to write costs more than it
  // saves; fetching more lines of a longer payload measured level or
  // slower: the header line alone (docs/performance-log.md, "The sixth
  // session on the Zen 5 host"). None in an exchange of small slots where
  // the CPU has PREFETCHW: the peer takes those lines for writing first
  // (own_lines_), and fetching them too measured slower ("Taking the next
  // slot for writing").
  static constexpr size_t kMaxNextLines = 2;  // a header and 96 bytes
  int next_lines_ = 1;
  // The lines of this rank's slot from its header's to the last this
  // operation published in (0: it did not publish); FinishReads takes as
  // many of its next slot for writing (at most a small slot's).
  size_t own_lines_ = 0;
  std::vector<PeerBuffers> peers_;  // filled by ExchangeAddresses

  friend Status ExchangeAddresses(AreaOp& op, const void* send, void* recv, const std::vector<uint64_t>& table,
                                  std::vector<std::vector<uint64_t>>* tables);
};

// Reads `bytes` at `remote` in process `pid` into `local` (process_vm_readv,
// looping over partial reads). PeerLost when the process is gone.
// A transfer RemoteCopyBounces names goes through a buffer in this process.
Status ReadRemote(int pid, int peer_rank, void* local, uint64_t remote, size_t bytes);
// The other direction (process_vm_writev): `local` into `remote` in `pid`.
Status WriteRemote(int pid, int peer_rank, uint64_t remote, const void* local, size_t bytes);
// True when the kernel's copy for this transfer (a write: local to remote; a
// read: remote to local) would run between addresses kernels::CopyAliased
// names and it is large enough that a copy through a buffer at the remote
// page offset (the kernel's part then unaliased) is faster.
inline constexpr size_t kRemoteBounceMinBytes = 4096;
bool RemoteCopyBounces(bool write, const void* local, uint64_t remote, size_t bytes);

// Publishes this rank's buffer addresses, and where they lie in SharedBuffers
// (plus an optional table of numbers, as long on every rank: a peer's of
// another length is a CollectiveMismatch), reads every rank's into
// op.peers() (and `tables`), then releases the slots.
Status ExchangeAddresses(AreaOp& op, const void* send, void* recv, const std::vector<uint64_t>& table = {},
                         std::vector<std::vector<uint64_t>>* tables = nullptr);
// Copies `bytes` from local rank p's memory at `remote` into `dst`: with
// plain loads from a mapped SharedBuffer, else (process_vm_readv) straight
// into dst below kDirectCopyMaxBytes (through ReadRemote's buffer when
// RemoteCopyBounces), through a cache-resident buffer and streaming stores
// beyond.
Status CopyFromPeer(AreaOp& op, int p, uint8_t* dst, uint64_t remote, size_t bytes);
// Writes `bytes` from `src` to `remote` in local rank p's memory: plain (or,
// with `nontemporal`, streaming) stores into a mapped SharedBuffer, else
// process_vm_writev.
Status CopyToPeer(AreaOp& op, int p, uint64_t remote, const void* src, size_t bytes, bool nontemporal = false);
// How ReduceFromPeers writes its result.
struct ReduceWalk {
  // Also write every finished chunk into each peer's `recv` buffer at the
  // same offset, so that an allreduce needs no gather phase.
  bool push = false;
  // `dst` (and the pushes into SharedBuffers) with streaming stores.
  bool streaming = false;
  // Finishes ReduceOp::kAvg: the kernel divides before its stores where
  // the type allows (AverageDivisor), else each finished chunk is divided
  // apart (DividesApart); on_chunk gets the divided result either way.
  bool average = false;
};
// dst = combination over every local rank of the `elems` elements at byte
// offset `offset` of their `send` buffers (this rank's from `own`), chunk by
// chunk; after each chunk, on_chunk(chunk_index, result_chunk,
// elems_in_chunk), which may still change the result.
Status ReduceFromPeers(AreaOp& op, const uint8_t* own,
                       uint64_t offset, size_t elems, uint8_t* dst,
                       const std::function<void(uint64_t, uint8_t*, size_t)>& on_chunk, ReduceWalk walk);

inline constexpr size_t kCmaChunkBytes = 512 * 1024;   // per peer: fits the L2 cache
inline constexpr size_t kStreamingBytes = 4u << 20;     // larger outputs bypass the caches
// One kernel copy straight into the destination measured faster than a copy
// through the cache plus streaming stores up to 32-64 MiB (broadcast 16 MiB:
// 15-17 against 11-14 GB/s; docs/performance-log.md).
inline constexpr size_t kDirectCopyMaxBytes = 64u << 20;
// An in-place broadcast root writes a share into every receiver from here
// on (BroadcastCma). At 256 KiB before; the share measured 1.26x–1.54x faster
// at 64–128 KiB too (docs/performance-log.md, "Mid-size calls and 4-rank scaling").
inline constexpr size_t kRootShareMinBytes = 32 * 1024;
// With every rank's buffers in SharedBuffers, the owner of a slice always
// pushes it, with streaming stores from the size of the whole buffer this
// returns: once the host's ranks' buffers (2 x local_ranks x bytes) no longer
// fit the last-level cache of `l3_bytes`, within 8-32 MiB; 8 MiB when the
// ranks share cores; 32 MiB when the cache size is unknown (0). Measured
// (docs/performance-log.md): on the Intel host (260 MiB L3) plain stores were
// ahead at 16 MiB with a core per rank (7.85 against 6.3 GB/s) and streaming
// from 8 MiB ahead with 4 ranks on 2 cores ("Mid-size calls and 4-rank
// scaling"); on the AMD host (32 MiB L3) streaming from 8 MiB was 1.33x
// faster at 8 and 16 MiB with a core per rank and slower at 4 MiB ("The
// streaming threshold on the AMD host").
size_t SharedReduceStreamingBytes(int local_ranks, bool ranks_share_cpus, size_t l3_bytes);
inline constexpr size_t kSharedGatherStreamingBytes = 2u << 20;   // of the whole output

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_LOCAL_OPS_H_
