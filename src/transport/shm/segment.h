// Shared-memory segment owned by one rank: its inbound rings (one per rank
// on the same host), its doorbell and its abort record.
//
// Layout (docs/protocols.md, "Shared-memory segment"):
//   SegmentHeader (4 KiB) | local area (local_area.h, padded to 4 KiB)
//   | RingCtl + data for slot 0 | ... | slot n-1
// Slot s holds the ring written by the host's s-th rank (local index) and read
// by the owner. Rings are single-producer single-consumer byte rings with
// monotonically increasing 64-bit head/tail counters; every record starts on a
// 64-byte boundary.
//
// The segment is created with shm_open by its owner, mapped by every local
// peer, and unlinked by the owner once all peers have mapped it, so nothing is
// left in /dev/shm after set-up even if a rank later crashes.
//
// Thread-safety: the atomics are the synchronization; see ShmChannel.
#ifndef CHOIR_TRANSPORT_SHM_SEGMENT_H_
#define CHOIR_TRANSPORT_SHM_SEGMENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "choir/status.h"
#include "transport/shm/local_area.h"

namespace choir::transport {

inline constexpr uint64_t kSegmentMagic = 0x43484f4952534547ull;  // "CHOIRSEG"
inline constexpr uint32_t kSegmentLayoutVersion = 9;

struct alignas(64) SegmentHeader {
  uint64_t magic;
  uint32_t layout_version;
  int32_t rank;
  int32_t pid;
  int32_t num_slots;
  uint64_t ring_bytes;
  uint64_t token;  // random; published through the store so peers know they mapped the right file
  uint64_t area_slot_bytes;  // payload bytes per slot of the local area
  uint64_t area_pipe_bytes;  // bytes of the local area's pipe
  uint64_t self_addr;        // where the owner mapped this segment (to test process_vm_readv)
  alignas(64) std::atomic<uint32_t> doorbell;  // futex word: bumped when the owner should re-check
  alignas(64) std::atomic<uint32_t> sleeping;  // owner is (about to be) blocked on doorbell
  alignas(64) std::atomic<int32_t> abort_code;  // nonzero once the owner failed
  char abort_text[2048];
  // Nonzero once the owner destroyed its communicator cleanly (its "bye"):
  // its exit is then no failure unless a peer still needs data from it.
  alignas(64) std::atomic<int32_t> departed;
};
static_assert(sizeof(SegmentHeader) <= 4096);

struct alignas(64) RingCtl {
  alignas(64) std::atomic<uint64_t> head;  // bytes written by the producer
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed by the owner
};

// A mapping of one segment (own or a peer's).
class Segment {
 public:
  // Creates and maps a new segment named `name` ("/choir-..."), fails with
  // ShmError if it exists or /dev/shm is too small.
  static Result<std::unique_ptr<Segment>> Create(const std::string& name, int rank, int num_slots,
                                                 size_t ring_bytes, size_t area_slot_bytes,
                                                 size_t area_pipe_bytes, uint64_t token);
  // Maps a peer's segment and checks magic, layout, rank and token.
  static Result<std::unique_ptr<Segment>> Open(const std::string& name, int expected_rank,
                                               uint64_t expected_token);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base_); }
  RingCtl* ring_ctl(int slot) const;
  uint8_t* ring_data(int slot) const { return reinterpret_cast<uint8_t*>(ring_ctl(slot)) + sizeof(RingCtl); }
  size_t ring_bytes() const { return header()->ring_bytes; }
  AreaView area() const { return AreaView(base_ + 4096, header()->area_slot_bytes, header()->area_pipe_bytes); }
  const std::string& name() const { return name_; }
  // Removes the name from /dev/shm (mappings stay valid). Idempotent.
  void Unlink();

  // The sizes' validity (InvalidSetting naming the variable), checked on
  // every rank whether or not it has local peers.
  static Status CheckSizes(size_t ring_bytes, size_t area_slot_bytes, size_t area_pipe_bytes);
  static size_t TotalBytes(int num_slots, size_t ring_bytes, size_t area_slot_bytes, size_t area_pipe_bytes);
  // OutOfMemory when the segments of `local_ranks` ranks of one host (each
  // holds a ring from every local rank, so they grow with its square) cannot
  // fit: more than /dev/shm holds, or than the host's memory. Checked before
  // anything is reserved, so that too many ranks on one host get a message
  // instead of a full /dev/shm and the out-of-memory killer. `shm_dir` and
  // `meminfo` are for tests.
  static Status CheckRoom(int local_ranks, size_t ring_bytes, size_t area_slot_bytes, size_t area_pipe_bytes,
                          const std::string& shm_dir = "/dev/shm", const std::string& meminfo = "/proc/meminfo");

  // "/choir-<hash of job_key>-<rank>-<pid>": the segment of rank `rank`,
  // created by process `pid`, in the job and communicator `job_key` names.
  static std::string NameFor(const std::string& job_key, int rank, int pid);
  // Removes the segments that processes `pids` created and left behind (they
  // were killed before they could unlink them); returns how many. Only files
  // named for one of `pids` whose header names that process as its owner (or
  // that are still empty) go. The launcher calls it for a rank killed by a
  // signal while the rank is an unreaped zombie, so that its process id
  // cannot have been reused. `shm_dir` is for tests.
  static int RemoveLeftBy(const std::vector<int>& pids, const std::string& shm_dir = "/dev/shm");

  // The header, the area's control lines and its slots: Create and Open map
  // them into the process at once (MapPagesNow), so that the first
  // operations through each slot do not pay the pages' first touches; of
  // each full slot its first kMappedFullSlotBytes, the stride of a slot of
  // the default 64 KiB (docs/protocols.md, "Shared-memory segment").
  static constexpr size_t kMappedFullSlotBytes = 64 * 1024 + 64;

 private:
  Segment(std::string name, void* base, size_t bytes, bool owner)
      : name_(std::move(name)), base_(static_cast<uint8_t*>(base)), bytes_(bytes), owner_(owner) {}
  std::string name_;
  uint8_t* base_;
  size_t bytes_;
  bool owner_;
  bool unlinked_ = false;
};

// Maps the pages that hold [base, base + bytes) (in a shared mapping) into
// this process now, as writes would, without writing them:
// MADV_POPULATE_WRITE, or, where the kernel refuses it (before Linux 5.14)
// or `use_madvise` is false (tests), one read per page, which maps a shared
// memory page writable too. Best effort: a page left unmapped is mapped at
// its first touch.
void MapPagesNow(void* base, size_t bytes, bool use_madvise = true);

// Doorbells. The owner of a segment that wants to block announces it
// (AnnounceSleep), re-checks what it waits for, then sleeps (WaitSegment);
// a peer that published something calls NotifySegment, which wakes the owner
// only if it announced. The announcement and the publication must not pass
// each other: a store-load barrier on both sides. The notifying side is the
// hot path (every publication), so where the kernel offers it the barrier is
// asymmetric: notifiers issue none, and the rare sleeper runs
// membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), which makes every registered
// process execute one before the sleeper re-checks. A process that cannot
// register keeps a full fence per notification.

// Wakes the owner of `h` if it sleeps (call after publishing new ring state).
void NotifySegment(SegmentHeader* h);
// Marks the owner of `h` as about to sleep; call, then re-check the wait
// condition, then WaitSegment at most the returned nanoseconds (`want_ns`, or
// 1 ms when the sleeper's barrier failed and a wake-up could be missed), then
// clear h->sleeping.
int64_t AnnounceSleep(SegmentHeader* h, int64_t want_ns);
// True when this process notifies without a fence (registered for the barrier).
bool NotifiesWithoutFence();
// Wakes the owner unconditionally (abort).
void ForceWakeSegment(SegmentHeader* h);
// Blocks until h->doorbell != seen or `timeout_ns` passes.
void WaitSegment(SegmentHeader* h, uint32_t seen, int64_t timeout_ns);

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_SHM_SEGMENT_H_
