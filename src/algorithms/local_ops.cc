#include "algorithms/local_ops.h"

#include <sys/uio.h>

#include <cerrno>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "algorithms/algorithms.h"
#include "base/hash.h"
#include "kernels/reduce.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace choir::algorithms {
namespace {

// Fetches the cache line at `p` for writing (PREFETCHW): the line arrives
// owned, and copies in other caches are dropped, before the stores that need
// it are issued.
#if defined(__x86_64__)
// PREFETCHW's CPUID bit (3DNowPrefetch, ECX bit 8 of leaf 0x80000001): AMD
// CPUs and Intel ones since Broadwell. Without it the hint is skipped.
bool CpuPrefetchesForWrite() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(0x80000001, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 8)) != 0;
}
const bool kPrefetchForWrite = CpuPrefetchesForWrite();
// Written out: __builtin_prefetch emits PREFETCHW only where the whole file
// is compiled for it.
inline void PrefetchForWrite(const void* p) { asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p))); }
#else
constexpr bool kPrefetchForWrite = true;
inline void PrefetchForWrite(const void* p) { __builtin_prefetch(p, 1, 3); }
#endif

// A hash of an operation's signature and of the history before it: its low
// 32 bits are SlotHeader::history after the operation (a disagreement goes
// unseen with odds of 1 in 4 billion), all 64 go into the lines' flags
// (LineFlag).
uint64_t SignatureHash(uint32_t history, uint64_t sig, uint64_t count) {
  return Mix64((uint64_t{history} << 32 | history) ^ sig ^ (count * 0x9e3779b97f4a7c15ull));
}

}  // namespace

size_t SharedReduceStreamingBytes(int local_ranks, bool ranks_share_cpus, size_t l3_bytes) {
  constexpr size_t kLeast = 8u << 20;
  constexpr size_t kMost = 32u << 20;
  if (ranks_share_cpus) return kLeast;
  if (l3_bytes == 0 || local_ranks < 1) return kMost;
  return std::clamp(l3_bytes / (2 * static_cast<size_t>(local_ranks)), kLeast, kMost);
}

bool LocalGroupUsable(const Context& c) {
  const transport::LocalGroup* g = c.local_group();
  if (g == nullptr || g->size() != c.size() || g->size() < 2) return false;
  if (c.covers_whole_comm()) return true;
  // A subgroup qualifies when it is exactly this host's ranks, in rank order
  // (then group rank == local index).
  return c.GroupRanks() == g->ranks;
}

AreaOp::AreaOp(Context& c, size_t payload) : ctx_(&c), group_(c.local_group()) {
  id_ = group_->next_id++;
  history_ = group_->history;
  mix_ = SignatureHash(history_, c.sig_word(), c.sig_count());
  ring_ = transport::RingFor(payload);
  depth_ = transport::RingDepth(ring_);
  slot_ = SlotOf(id_);
  const size_t lines = (sizeof(transport::SlotHeader) + payload + 63) / 64;
  if (small() && lines <= kMaxNextLines) next_lines_ = static_cast<int>(lines);
}

Status AreaOp::Wait(absl::FunctionRef<bool(int)> owes, const char* to_do, bool marks_data) {
  return ctx_->WaitLocal(owes, [&] {
    std::string who;
    for (int p = 0; p < size(); ++p) {
      if (p != me() && owes(p)) who += (who.empty() ? "rank " : ", rank ") + std::to_string(group_->ranks[static_cast<size_t>(p)]);
    }
    return who + " " + to_do;
  }, marks_data);
}

Status AreaOp::Acquire() {
  // Free for sure: the first use of the slot, or every peer is known to have
  // finished reading the operation that last used it (local_group.h).
  const auto depth = static_cast<uint64_t>(depth_);
  if (id_ <= depth) return Status::Ok();
  const uint64_t need = id_ - depth;  // the previous operation that used this slot
  if (group_->read_by_all >= need) return Status::Ok();
  auto read_through = [&](int p) {
    return group_->areas[static_cast<size_t>(p)].ctl()->read_through.load(std::memory_order_acquire);
  };
  CHOIR_RETURN_IF_ERROR(Wait([&](int p) { return read_through(p) < need; },
                             "to finish reading this rank's shared slot"));
  // What the peers have read by now covers the next few operations too:
  // they need not read the peers' lines again.
  uint64_t least = UINT64_MAX;
  for (int p = 0; p < size(); ++p) {
    if (p != me()) least = std::min(least, read_through(p));
  }
  group_->read_by_all = std::max(group_->read_by_all, least);
  return Status::Ok();
}

transport::SlotHeader* AreaOp::WriteHeader(uint64_t bytes, bool peers_read) {
  if (bytes > 0 && peers_read) next_lines_ = small() && kPrefetchForWrite ? 0 : 1;  // an exchange (next_lines_)
  transport::SlotHeader* h = header(me());
  h->sig = ctx_->sig_word();
  h->count = ctx_->sig_count();
  h->bytes = static_cast<uint32_t>(std::min<uint64_t>(bytes, UINT32_MAX));
  h->history = history_;
  group_->history = static_cast<uint32_t>(mix_);
  h->id.store(id_, std::memory_order_release);
  return h;
}

void AreaOp::Publish(uint64_t bytes, bool peers_read) {
  own_lines_ = (sizeof(transport::SlotHeader) + bytes + 63) / 64;
  WriteHeader(bytes, peers_read);
  group_->NotifyPeers();
}

namespace {
// A line's flag: the operation id mixed with the writer's segment token
// (64 random bits, never written after the segment is made), so that the
// bytes an operation of the slots' own layout left in the line (any user
// data) are taken for a flag only if they hold that value at that place;
// and with `mix`, SignatureHash of the operation's signature and of the
// writer's history (SlotHeader::history). A reader expects its own signature and
// history there: lines that carry the flag it expects come from a peer
// that runs the same collective after the same ones, which is all the
// header would have told it. So it reads no header unless it has to wait.
// Lines left by the operation before in the same slot differ in the id,
// and in the history the mix carries (it changes with every operation):
// they match with odds of 1 in 2^64.
uint64_t LineFlag(uint64_t id, const transport::SegmentHeader* writer, uint64_t mix) {
  return id ^ writer->token ^ mix;
}
// A reader waiting for a peer's lines reads that peer's header, to tell a
// peer that published under another signature or in another ring from one
// that has not published yet, only at every kHeaderPollEvery-th poll of
// its wait (while spinning, a few dozen pauses), and at every poll once a
// wait has taken kHeaderPollAlways polls (a peer that late is in no tight
// exchange; a rank that sleeps then reads it when woken) or has failed (a
// timeout or a peer gone: the mismatch, if there is one, is the better
// report). Read at every poll, the header's line, which the
// writer is about to store into as it publishes, sat in this core's cache,
// and the writer's stores waited for it to be taken back (the explanation
// the measurements fit; not observed directly). On the AMD EPYC Zen 4
// host, `choir perf -n 2 --op allreduce --iters 5000`, 9 interleaved
// launches in each order, the busbw of 8-256 B rose 1.08x-1.25x and
// 1.03x-1.25x (medians of paired ratios; 512 B-1 KiB 0.95x-1.00x), level
// with or past Open MPI in the same launches (docs/performance-log.md,
// "The peer's header read less often").
constexpr uint32_t kHeaderPollEvery = 32;
constexpr uint32_t kHeaderPollAlways = 256;
// Lines of up to 392 bytes fit a small slot, the rest a medium one (and
// any full slot, where an allgather's or reduce_scatter's blocks go when
// every rank's block needs lines of its own).
static_assert(AreaOp::LineLayoutBytes(7 * AreaOp::kLinePayload) <= transport::kSmallSlotPayload);
static_assert(AreaOp::LineLayoutBytes(AreaOp::kLinesMaxBytes) <= transport::kMediumSlotPayload);
static_assert(AreaOp::LineLayoutBytes(AreaOp::kLinesMaxBytes) <= transport::kSlotMinCapacity);
static_assert(transport::kSlotMinCapacity <= transport::kMediumSlotPayload);
uint8_t* LineOf(transport::SlotHeader* h, size_t j) { return reinterpret_cast<uint8_t*>(h) + 64 * (j + 1); }
// Flags are read and written by other processes: lock-free atomics only.
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);
std::atomic_ref<uint64_t> FlagOf(uint8_t* line) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(line + AreaOp::kLinePayload));
}
}  // namespace

uint64_t AreaOp::OwnFlag() { return LineFlag(id_, group_->headers[static_cast<size_t>(me())], mix_); }

namespace {
// Calls copy(j, offset, length) for each of the lines that hold `bytes`
// (line j holds the bytes from offset j * kLinePayload on). Every line but
// the last is full, and its call passes the constant kLinePayload: inlined,
// a copy of that length takes a few vector moves instead of a call into
// memcpy, which only the last line's copy, of any length, still makes.
template <typename Copy>
void ForEachLine(uint64_t bytes, Copy&& copy) {
  const size_t n = AreaOp::LinesOf(bytes);
  if (n == 0) return;
  for (size_t j = 0; j + 1 < n; ++j) copy(j, j * AreaOp::kLinePayload, AreaOp::kLinePayload);
  const size_t at = (n - 1) * AreaOp::kLinePayload;
  copy(n - 1, at, static_cast<size_t>(bytes - at));
}

// Stores `bytes` from `in` in the lines from `first` on, each flag after
// its payload.
void WriteLines(transport::SlotHeader* h, const uint8_t* in, uint64_t bytes, size_t first, uint64_t flag) {
  ForEachLine(bytes, [&](size_t j, size_t at, size_t length) {
    uint8_t* line = LineOf(h, first + j);
    std::memcpy(line, in + at, length);
    FlagOf(line).store(flag, std::memory_order_release);
  });
}
}  // namespace

void AreaOp::PublishLines(const void* src, uint64_t bytes) {
  // The header first: a reader that sees every line's flag sees it too.
  transport::SlotHeader* h = WriteHeader(bytes);
  own_lines_ = 1 + LinesOf(bytes);
  WriteLines(h, static_cast<const uint8_t*>(src), bytes, 0, OwnFlag());
  group_->NotifyPeers();
}

void AreaOp::PublishBlockLines(const void* src, uint64_t block, int skip) {
  transport::SlotHeader* h = WriteHeader(block * static_cast<uint64_t>(size()));
  const uint64_t flag = OwnFlag();
  const auto* in = static_cast<const uint8_t*>(src);
  const size_t per = AreaOp::LinesOf(block);
  own_lines_ = 1 + per * static_cast<size_t>(size());
  for (int b = 0; b < size(); ++b) {
    if (b != skip) WriteLines(h, in + static_cast<size_t>(b) * block, block, static_cast<size_t>(b) * per, flag);
  }
  group_->NotifyPeers();
}

Status AreaOp::WaitLines(uint64_t bytes, size_t first_line) {
  const size_t end = first_line + AreaOp::LinesOf(bytes);
  const uint64_t mix = mix_;
  int wrong = -1, elsewhere = -1;
  // Polls of peers whose lines are missing (in a wait, of the first such
  // peer: the wait polls up to it); kHeaderPollAlways after a failed wait.
  uint32_t polls = 0;
  auto owes = [&](int p) {
    if (wrong >= 0 || elsewhere >= 0) return false;
    transport::SlotHeader* h = header(p);
    const uint64_t flag = LineFlag(id_, group_->headers[static_cast<size_t>(p)], mix);
    bool all = true;
    for (size_t j = first_line; j < end; ++j) all &= FlagOf(LineOf(h, j)).load(std::memory_order_acquire) == flag;
    if (all) return false;
    if (polls < kHeaderPollAlways && ++polls % kHeaderPollEvery != 0) return true;
    if (h->id.load(std::memory_order_acquire) == id_) {
      // Published here under another signature, or after other operations:
      // its lines never carry the flag expected here (CheckSignature names
      // the difference below).
      if (h->sig != ctx_->sig_word() || h->count != ctx_->sig_count() || h->history != history_) wrong = p;
      return wrong < 0;
    }
    if (InOtherRing(p)) elsewhere = p;
    return elsewhere < 0;
  };
  // Already there (a peer that runs ahead): no wait to set up.
  bool ready = true;
  for (int p = 0; p < size(); ++p) ready &= p == me() || !owes(p);
  const Status waited = ready ? Status::Ok() : Wait(owes, "to arrive (same-host slots)", /*marks_data=*/true);
  if (!waited.ok()) {
    // Every header read once more, whatever the poll count.
    polls = kHeaderPollAlways;
    for (int p = 0; p < size(); ++p) {
      if (p != me()) owes(p);
    }
  }
  // A mismatch seen last (even while a timeout's message was written) wins.
  if (elsewhere >= 0) return OtherRingMismatch(elsewhere);
  if (wrong >= 0) return CheckSignature(wrong, header(wrong));
  CHOIR_RETURN_IF_ERROR(waited);
  // The flags vouched for every peer's signature and history.
  MarkReadFromAll();
  for (int p = 0; p < size(); ++p) {
    if (p != me()) ctx_->CountSharedRead(p, bytes);
  }
  return Status::Ok();
}

void AreaOp::ReadLines(int p, void* dst, uint64_t bytes, size_t first_line) const {
  transport::SlotHeader* h = header(p);
  auto* out = static_cast<uint8_t*>(dst);
  ForEachLine(bytes, [&](size_t j, size_t at, size_t length) {
    std::memcpy(out + at, LineOf(h, first_line + j), length);
  });
}

Status AreaOp::CheckSignature(int p, const transport::SlotHeader* h) const {
  if (h->sig != ctx_->sig_word() || h->count != ctx_->sig_count()) {
    return ctx_->Mismatch(h->sig, h->count, group_->ranks[static_cast<size_t>(p)]);
  }
  if (h->history != history_) {
    return Status(Code::kCollectiveMismatch,
                  fmt::format("rank {} and this rank called different collectives earlier, in one that "
                              "read nothing from the other (a broadcast, scatter, reduce or gather whose "
                              "ranks named different roots, for instance): its results are wrong on one "
                              "of them. Make every rank make the same calls with the same root",
                              group_->ranks[static_cast<size_t>(p)]));
  }
  return Status::Ok();
}

const transport::SlotHeader* AreaOp::OtherRingHeader(int p) const {
  for (const transport::Ring r : transport::kRings) {
    if (r == ring_) continue;
    const transport::SlotHeader* h = ring_header(p, r);
    if (h->id.load(std::memory_order_acquire) == id_) return h;
  }
  return nullptr;
}

Status AreaOp::OtherRingMismatch(int p) const {
  // Found there a moment ago, and a peer cannot reuse that slot before this
  // rank has read through this id; checked again all the same.
  if (const transport::SlotHeader* h = OtherRingHeader(p); h != nullptr) CHOIR_RETURN_IF_ERROR(CheckSignature(p, h));
  // Equal signatures, different rings: the ranks disagree about the payload
  // (uneven counts that differ between ranks).
  return Status(Code::kCollectiveMismatch,
                fmt::format("rank {} published this collective in another ring of shared slots: the ranks "
                            "disagree about its payload (the per-rank counts differ between ranks)",
                            group_->ranks[static_cast<size_t>(p)]));
}

Status AreaOp::WaitFor(int p, uint64_t reads) {
  const transport::SlotHeader* h = header(p);
  // A peer that published this id in another ring runs another collective:
  // stop waiting (it would never publish here) and report the mismatch.
  bool elsewhere = false;
  // Already there (a peer that runs ahead): no wait to set up.
  if (h->id.load(std::memory_order_acquire) != id_) {
    CHOIR_RETURN_IF_ERROR(Wait([&](int q) {
      if (q != p || h->id.load(std::memory_order_acquire) == id_) return false;
      elsewhere = InOtherRing(q);
      return !elsewhere;
    }, "to arrive (same-host slot)", /*marks_data=*/true));
  }
  if (elsewhere) return OtherRingMismatch(p);
  CHOIR_RETURN_IF_ERROR(CheckSignature(p, h));
  ctx_->CountSharedRead(p, std::min<uint64_t>(reads, h->bytes));
  read_from_ = read_from_ == kReadNone || read_from_ == p ? p : kReadAll;
  return Status::Ok();
}

bool AreaOp::AllPublished() const {
  for (int p = 0; p < size(); ++p) {
    if (p != me() && header(p)->id.load(std::memory_order_acquire) != id_) return false;
  }
  return true;
}

Status AreaOp::WaitAll(uint64_t reads) {
  int elsewhere = -1;
  if (!AllPublished()) {
    CHOIR_RETURN_IF_ERROR(Wait([&](int p) {
      if (elsewhere >= 0 || header(p)->id.load(std::memory_order_acquire) == id_) return false;
      if (InOtherRing(p)) {
        elsewhere = p;
        return false;
      }
      return true;
    }, "to arrive (same-host slots)", /*marks_data=*/true));
  }
  if (elsewhere >= 0) return OtherRingMismatch(elsewhere);
  return ReadFromAll(reads);
}

void AreaOp::MarkReadFromAll() {
  group_->read_by_all = std::max(group_->read_by_all, id_ - 1);  // see Acquire
  read_from_ = kReadAll;
}

Status AreaOp::ReadFromAll(uint64_t reads) {
  MarkReadFromAll();
  for (int p = 0; p < size(); ++p) {
    if (p == me()) continue;
    CHOIR_RETURN_IF_ERROR(CheckSignature(p, header(p)));
    ctx_->CountSharedRead(p, std::min<uint64_t>(reads, bytes(p)));
  }
  return Status::Ok();
}

void AreaOp::FinishReads() {
  // Touches no peer's line: a rank that read nobody's slot (a broadcast
  // root, a reduce sender) must not pull in lines its peers keep writing.
  // (Taking its own next slot for writing drops that slot's lines from the
  // peers' caches, as its next stores would.)
  group_->mine().ctl()->read_through.store(id_, std::memory_order_release);
  group_->NotifyPeers();
  // Take the lines of this rank's next small slot for writing now, as many
  // as this operation published in (the next call is assumed alike):
  // otherwise its next publication stores into lines its peers still hold
  // from reading this slot's last use, and the first locked instruction after those
  // stores (the Work's reference count, the engine's claim) waits for them
  // to be taken over from the peers' caches (the explanation the
  // measurements fit; not observed directly). Only when the slot is free for
  // sure (Acquire): a peer that lags a whole ring behind may still be
  // reading it. Small slots only: taking a full slot's lines measured slower
  // or mixed (docs/performance-log.md, "Taking the next slot for writing").
  const uint64_t next_id = id_ + 1;
  const auto depth = static_cast<uint64_t>(depth_);
  if (kPrefetchForWrite && small() && own_lines_ > 0 && (next_id <= depth || group_->read_by_all >= next_id - depth)) {
    const auto* own = reinterpret_cast<const uint8_t*>(group_->mine().small_slot(SlotOf(next_id)));
    const size_t lines = std::min(own_lines_, transport::kSmallSlotStride / 64);
    for (size_t l = 0; l < lines; ++l) PrefetchForWrite(own + 64 * l);
  }
  // Start fetching the next slot header of each peer this operation read:
  // in a stream of small collectives that peer has often published there
  // already (it runs ahead), and the line then crosses between the caches
  // while this rank returns and starts its next call, not when it first
  // polls. Peers it did not read are left alone, as above.
  // The next operation is assumed to take the same ring (streams of one
  // collective are the case that matters).
  if (read_from_ == kReadNone) return;
  const int next = SlotOf(next_id);
  for (int p = 0; p < size(); ++p) {
    if (p != me() && (read_from_ == kReadAll || read_from_ == p)) {
      const transport::AreaView& a = group_->areas[static_cast<size_t>(p)];
      const auto* line = reinterpret_cast<const uint8_t*>(a.ring_slot(ring_, next));
      for (int l = 0; l < next_lines_; ++l) __builtin_prefetch(line + 64 * l, 0, 3);
    }
  }
}

void AreaOp::SetProgress(uint64_t chunks_done) {
  group_->mine().ctl()->progress.store((id_ << transport::kProgressShift) | chunks_done, std::memory_order_release);
  group_->NotifyPeers();
}

Status AreaOp::WaitProgress(int p, uint64_t chunks) {
  const uint64_t want = (id_ << transport::kProgressShift) | chunks;
  const auto* ctl = group_->areas[static_cast<size_t>(p)].ctl();
  return Wait([&](int q) { return q == p && ctl->progress.load(std::memory_order_acquire) < want; },
              "to finish its share (same-host)");
}

void AreaOp::SetConsumed(uint64_t steps) {
  group_->mine().ctl()->consumed.store((id_ << transport::kProgressShift) | steps, std::memory_order_release);
  group_->NotifyPeers();
}

Status AreaOp::WaitConsumedByAll(uint64_t steps) {
  const uint64_t want = (id_ << transport::kProgressShift) | steps;
  return Wait([&](int p) { return group_->areas[static_cast<size_t>(p)].ctl()->consumed.load(std::memory_order_acquire) < want; },
              "to read this rank's shared pipe");
}

Status AreaOp::Finish() {
  group_->mine().ctl()->finished.store(id_, std::memory_order_release);
  group_->NotifyPeers();
  return Wait([&](int p) { return group_->areas[static_cast<size_t>(p)].ctl()->finished.load(std::memory_order_acquire) < id_; },
              "to finish reading this rank's buffers");
}

namespace {
// process_vm_readv / process_vm_writev over the whole range (they may move
// less than asked), with a peer that vanished mapped to PeerLost.
Status MoveRemote(bool write, int pid, int peer_rank, uint8_t* local, uint64_t remote, size_t bytes) {
  while (bytes > 0) {
    iovec l{local, bytes};
    iovec r{reinterpret_cast<void*>(remote), bytes};
    const ssize_t moved = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (moved <= 0) {
      const int err = moved < 0 ? errno : EIO;
      if (err == EINTR) continue;
      if (err == ESRCH) {
        return Status(Code::kPeerLost, fmt::format("rank {} (pid {}) exited during a same-host transfer", peer_rank, pid));
      }
      if (err == EFAULT) {
        // The peer's buffer is gone: it left this collective before we finished.
        return Status(Code::kPeerLost,
                      fmt::format("rank {} (pid {}) left the collective during a same-host transfer (its buffer "
                                  "is no longer mapped); it usually failed or was aborted first",
                                  peer_rank, pid));
      }
      return ErrnoError(Code::kSystemError, err,
                        fmt::format("{} of {} bytes {} rank {} (pid {})", write ? "process_vm_writev" : "process_vm_readv",
                                    bytes, write ? "to" : "from", peer_rank, pid));
    }
    local += moved;
    remote += static_cast<uint64_t>(moved);
    bytes -= static_cast<size_t>(moved);
  }
  return Status::Ok();
}

// The kernel copies with the string instruction kernels::CopyAliased warns
// about, so a transfer whose destination lies 1 to 63 bytes after its source
// modulo 4 KiB runs several times slower: process_vm_readv of 256 KiB at 1.5
// against 9.9 GB/s here (docs/performance-log.md, "Copies 4 KiB apart"). Such a
// transfer goes through a buffer placed at the remote address's offset in
// its page, in pieces that stay in the cache: the kernel copies between equal
// offsets, and the aliased copy is a vector loop in this process.
constexpr size_t kBouncePieceBytes = 128 * 1024;  // a multiple of 4 KiB

Status MoveRemoteAvoidingAliasing(bool write, int pid, int peer_rank, uint8_t* local, uint64_t remote,
                                  size_t bytes) {
  if (!RemoteCopyBounces(write, local, remote, bytes)) return MoveRemote(write, pid, peer_rank, local, remote, bytes);
  // One buffer per thread: the operations of one communicator run one at a
  // time, but several communicators may run on several threads.
  thread_local std::unique_ptr<uint8_t[]> storage;
  if (!storage) storage = std::make_unique_for_overwrite<uint8_t[]>(kBouncePieceBytes + 2 * 4096);
  const auto base = (reinterpret_cast<uintptr_t>(storage.get()) + 4095) & ~uintptr_t{4095};
  uint8_t* stage = reinterpret_cast<uint8_t*>(base + (remote & 4095));
  while (bytes > 0) {
    const size_t m = std::min(bytes, kBouncePieceBytes);
    if (write) {
      kernels::CopyBytes(stage, local, m, /*nontemporal=*/false);
      CHOIR_RETURN_IF_ERROR(MoveRemote(true, pid, peer_rank, stage, remote, m));
    } else {
      CHOIR_RETURN_IF_ERROR(MoveRemote(false, pid, peer_rank, stage, remote, m));
      kernels::CopyBytes(local, stage, m, /*nontemporal=*/false);
    }
    local += m;
    remote += m;
    bytes -= m;
  }
  return Status::Ok();
}
}  // namespace

bool RemoteCopyBounces(bool write, const void* local, uint64_t remote, size_t bytes) {
  const auto* far = reinterpret_cast<const void*>(remote);
  return bytes >= kRemoteBounceMinBytes && (write ? kernels::CopyAliased(far, local) : kernels::CopyAliased(local, far));
}

Status ReadRemote(int pid, int peer_rank, void* local, uint64_t remote, size_t bytes) {
  return MoveRemoteAvoidingAliasing(false, pid, peer_rank, static_cast<uint8_t*>(local), remote, bytes);
}

Status WriteRemote(int pid, int peer_rank, uint64_t remote, const void* local, size_t bytes) {
  return MoveRemoteAvoidingAliasing(true, pid, peer_rank, const_cast<uint8_t*>(static_cast<const uint8_t*>(local)),
                                    remote, bytes);
}

Status ExchangeAddresses(AreaOp& op, const void* send, void* recv, const std::vector<uint64_t>& table,
                         std::vector<std::vector<uint64_t>>* tables) {
  // The same on every rank (the table has one entry per local rank), so
  // every rank fails alike rather than one overrunning its slot.
  if (sizeof(PeerBuffers) + table.size() * sizeof(uint64_t) > op.slot_capacity()) {
    return Status(Code::kNotSupported,
                  fmt::format("{} local ranks need {} bytes of shared slot to exchange buffer addresses, more than "
                              "its {} (raise CHOIR_SHM_SLOT_BYTES)",
                              op.size(), sizeof(PeerBuffers) + table.size() * sizeof(uint64_t), op.slot_capacity()));
  }
  CHOIR_RETURN_IF_ERROR(op.Acquire());
  PeerBuffers mine{reinterpret_cast<uint64_t>(send), reinterpret_cast<uint64_t>(recv), {}, {}};
  // Peers may map SharedBuffers only with the permission single copy needs.
  if (op.ctx().local_group()->cma) {
    mine.send_ref = transport::FindShared(send, 0);
    mine.recv_ref = transport::FindShared(recv, 0);
  }
  std::memcpy(op.my_data(), &mine, sizeof(mine));
  if (!table.empty()) std::memcpy(op.my_data() + sizeof(mine), table.data(), table.size() * sizeof(uint64_t));
  op.Publish(sizeof(mine) + table.size() * sizeof(uint64_t));
  CHOIR_RETURN_IF_ERROR(op.WaitAll());
  op.peers_.resize(static_cast<size_t>(op.size()));
  if (tables) tables->resize(static_cast<size_t>(op.size()));
  for (int p = 0; p < op.size(); ++p) {
    // Every rank must publish as many numbers: a rank reading another's
    // table with its own length would read stale slot bytes.
    if (op.bytes(p) != sizeof(mine) + table.size() * sizeof(uint64_t)) {
      return Status(Code::kCollectiveMismatch,
                    fmt::format("rank {} published {} bytes of buffer addresses and numbers where this rank "
                                "published {}: the ranks run different versions or settings of the same collective",
                                op.ctx().local_group()->ranks[static_cast<size_t>(p)], op.bytes(p),
                                sizeof(mine) + table.size() * sizeof(uint64_t)));
    }
    std::memcpy(&op.peers_[static_cast<size_t>(p)], op.data(p), sizeof(PeerBuffers));
    if (tables && !table.empty()) {
      auto& t = (*tables)[static_cast<size_t>(p)];
      t.resize(table.size());
      std::memcpy(t.data(), op.data(p) + sizeof(PeerBuffers), table.size() * sizeof(uint64_t));
    }
  }
  op.FinishReads();
  op.ctx().local_group()->peer_buffers.NewOperation();
  return Status::Ok();
}

Result<uint8_t*> AreaOp::Reach(int p, uint64_t remote, size_t bytes) {
  if (static_cast<size_t>(p) >= peers_.size()) return static_cast<uint8_t*>(nullptr);
  const PeerBuffers& b = peers_[static_cast<size_t>(p)];
  for (const transport::SharedRef* ref : {&b.send_ref, &b.recv_ref}) {
    if (ref->id == 0 || remote < ref->base || remote - ref->base > ref->bytes || bytes > ref->bytes - (remote - ref->base)) {
      continue;
    }
    CHOIR_ASSIGN_OR_RETURN(uint8_t * base, group_->peer_buffers.Map(pid(p), group_->ranks[static_cast<size_t>(p)], *ref));
    ctx_->NoteSharedBuffers();
    return base + (remote - ref->base);
  }
  return static_cast<uint8_t*>(nullptr);
}

bool AreaOp::AllShared() const {
  return peers_.size() == static_cast<size_t>(size()) && EveryRankShares(&PeerBuffers::send_ref) &&
         EveryRankShares(&PeerBuffers::recv_ref);
}

bool AreaOp::EveryRankShares(transport::SharedRef PeerBuffers::*ref) const {
  return std::all_of(peers_.begin(), peers_.end(), [&](const PeerBuffers& b) { return (b.*ref).id != 0; });
}

bool AreaOp::AnyInPlace() const {
  return std::any_of(peers_.begin(), peers_.end(), [](const PeerBuffers& b) { return b.send == b.recv; });
}

bool AreaOp::ReduceShared(int root) const {
  if (peers_.size() != static_cast<size_t>(size()) || peers_[static_cast<size_t>(root)].recv_ref.id == 0) return false;
  return EveryRankShares(&PeerBuffers::send_ref);
}

Status CopyFromPeer(AreaOp& op, int p, uint8_t* dst, uint64_t remote, size_t bytes) {
  Context& c = op.ctx();
  c.CountSharedRead(p, bytes);
  CHOIR_ASSIGN_OR_RETURN(const uint8_t* mapped, op.Reach(p, remote, bytes));
  if (mapped != nullptr) {
    kernels::CopyBytes(dst, mapped, bytes, /*nontemporal=*/bytes >= kStreamingBytes);
    return Status::Ok();
  }
  if (bytes < kDirectCopyMaxBytes) return ReadRemote(op.pid(p), c.CommRank(p), dst, remote, bytes);
  CHOIR_ASSIGN_OR_RETURN(uint8_t* scratch, c.ScratchBytes(kCmaChunkBytes + 64));
  // At the source's offset within a line (pieces start a whole number of
  // lines apart, kCmaChunkBytes being one), as in ReduceFromPeers.
  uint8_t* tmp = scratch + (remote & 63);
  for (size_t done = 0; done < bytes; done += kCmaChunkBytes) {
    const size_t m = std::min(kCmaChunkBytes, bytes - done);
    CHOIR_RETURN_IF_ERROR(ReadRemote(op.pid(p), c.CommRank(p), tmp, remote + done, m));
    kernels::CopyBytes(dst + done, tmp, m, /*nontemporal=*/true);
  }
  return Status::Ok();
}

Status CopyToPeer(AreaOp& op, int p, uint64_t remote, const void* src, size_t bytes, bool nontemporal) {
  CHOIR_ASSIGN_OR_RETURN(uint8_t* mapped, op.Reach(p, remote, bytes));
  if (mapped == nullptr) return WriteRemote(op.pid(p), op.ctx().CommRank(p), remote, src, bytes);
  kernels::CopyBytes(mapped, src, bytes, nontemporal);
  return Status::Ok();
}

Status ReduceFromPeers(AreaOp& op, const uint8_t* own,
                       uint64_t offset, size_t elems, uint8_t* dst,
                       const std::function<void(uint64_t, uint8_t*, size_t)>& on_chunk, ReduceWalk walk) {
  Context& c = op.ctx();
  const std::vector<PeerBuffers>& bufs = op.peers();
  const int n = op.size();
  const size_t es = c.elem_size();
  const size_t chunk = std::max<size_t>(1, kCmaChunkBytes / es);
  const bool push = walk.push;
  const bool streaming = walk.streaming;
  const int divisor = AverageDivisor(c, walk.average);
  const bool divides_apart = DividesApart(c, walk.average);
  // n chunks: the peers' inputs, plus (pushing and streaming) the combined
  // chunk, kept in the cache for the pushes while `dst` gets streaming stores.
  const size_t chunks = static_cast<size_t>(n) + (push && streaming ? 1 : 0);
  const size_t stride = chunk * es + 64;
  CHOIR_ASSIGN_OR_RETURN(uint8_t* tmp, c.ScratchBytes(chunks * stride));
  uint8_t* combined =
      push && streaming ? tmp + static_cast<size_t>(n) * stride + (reinterpret_cast<uintptr_t>(dst) & 63) : nullptr;
  std::vector<const void*> srcs(static_cast<size_t>(n));
  uint64_t k = 0;
  for (size_t done = 0; done < elems; done += chunk, ++k) {
    const size_t m = std::min(chunk, elems - done);
    const uint64_t off = offset + done * es;
    for (int p = 0; p < n; ++p) {
      if (p == op.me()) {
        srcs[static_cast<size_t>(p)] = own + off;
        continue;
      }
      const uint64_t remote = bufs[static_cast<size_t>(p)].send + off;
      c.CountSharedRead(p, m * es);
      CHOIR_ASSIGN_OR_RETURN(const uint8_t* mapped, op.Reach(p, remote, m * es));
      if (mapped != nullptr) {
        srcs[static_cast<size_t>(p)] = mapped;
        continue;
      }
      uint8_t* buf = tmp + static_cast<size_t>(p) * stride + (remote & 63);
      CHOIR_RETURN_IF_ERROR(ReadRemote(op.pid(p), c.CommRank(p), buf, remote, m * es));
      srcs[static_cast<size_t>(p)] = buf;
    }
    uint8_t* out = dst + done * es;
    if (!push) {
      kernels::ReduceMany(out, srcs.data(), n, m, c.dtype(), c.op(), streaming, divisor);
      if (divides_apart) FinishAverage(c, out, m);
      if (on_chunk) on_chunk(k, out, m);
      continue;
    }
    uint8_t* result = streaming ? combined : out;
    kernels::ReduceMany(result, srcs.data(), n, m, c.dtype(), c.op(), false, divisor);
    if (divides_apart) FinishAverage(c, result, m);
    if (on_chunk) on_chunk(k, result, m);
    if (streaming) kernels::CopyBytes(out, result, m * es, /*nontemporal=*/true);
    for (int s = 1; s < n; ++s) {
      const int p = (op.me() + s) % n;
      CHOIR_RETURN_IF_ERROR(CopyToPeer(op, p, bufs[static_cast<size_t>(p)].recv + off, result, m * es, streaming));
    }
  }
  return Status::Ok();
}

}  // namespace choir::algorithms
