// The same-host collective area: a few control lines and three rings of data
// slots per rank (kAreaSlots full ones, kSmallSlots small and kMediumSlots
// medium ones), in the rank's own shared segment, read directly by every other
// rank of the host.
//
// Small collectives (shm_flat) work by publishing: each rank writes its input
// into a slot and bumps the slot's id; the others read it in place, so an
// 8-byte allreduce costs one cache-line transfer per peer and no copies
// through rings. Large collectives use the same ids to publish the addresses
// of their user buffers, which peers read with process_vm_readv (one copy,
// straight from the owner's memory) when the kernel allows it.
//
// Ids: every participating rank runs the same sequence of area operations,
// numbered 1, 2, 3... An operation whose payload fits kSmallSlotPayload uses
// small slot k % kSmallSlots, one that fits kMediumSlotPayload medium slot
// k % kMediumSlots, any other slot k % kAreaSlots (RingFor); every rank
// derives the same choice from the collective's arguments. A rank finishes
// operations in order and then raises `read_through` to k, so before
// writing a slot of a ring of depth D for operation k a rank waits until
// every peer's read_through reached k - D: the previous operation that used
// the slot has been read. Several slots let a rank that does not wait for
// its peers (a broadcast root, the senders of a reduce or gather) run that
// many operations ahead, so a stream of one-directional collectives is paced
// by the slowest rank's work, not by round trips between the caches; the
// small ring is deep (64) because that measured faster for streams of tiny
// collectives on ranks that share cores (docs/performance-log.md, "A deeper
// ring") and costs 32 KiB per rank. The medium ring is as deep for payloads
// of up to 16 KiB: a rank that writes lines its peers read only a few
// operations before waits for them to leave the peers' caches, and with 64
// slots of 1-16 KiB a broadcast or reduce stream ran 1.2-1.75x faster than
// with 8 on the Intel host (docs/performance-log.md, "A deeper ring for
// payloads of 1-16 KiB"); it costs 1 MiB per rank.
//
// Large collectives without process_vm_readv, or where streaming through the
// caches beats it (shm_pipe), stage chunks in the area's pipe: a region the
// owner writes and every peer reads while it is still cache-resident.
//
// Layout (docs/protocols.md, "Shared-memory segment"):
//   AreaCtl (256 B) | slot 0: SlotHeader (32 B) + data | slot 1: ... |
//   small slot 0: SlotHeader + 480 B | ... small slot 63 |
//   medium slot 0: SlotHeader + 16 KiB + 32 B | ... medium slot 63 | pipe
// Slot data starts inside the header's cache line, so payloads of up to 32
// bytes travel with their id in a single line. Allreduces of up to 1 KiB
// use the lines after the header's another way: 56 bytes of payload and a
// flag word each (algorithms/local_ops.h, AreaOp::PublishLines).
//
// Thread-safety: the atomics synchronize the processes; within a process one
// thread (the communicator's engine) uses the area at a time.
#ifndef CHOIR_TRANSPORT_SHM_LOCAL_AREA_H_
#define CHOIR_TRANSPORT_SHM_LOCAL_AREA_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace choir::transport {

inline constexpr int kAreaSlots = 8;
inline constexpr int kSmallSlots = 64;
inline constexpr size_t kSmallSlotStride = 512;
inline constexpr int kMediumSlots = 64;
inline constexpr size_t kMediumSlotStride = 16 * 1024 + 64;

// The three rings of an area. An operation's payload picks one (RingFor).
enum class Ring : uint8_t { kSmall, kMedium, kFull };
inline constexpr Ring kRings[] = {Ring::kSmall, Ring::kMedium, Ring::kFull};
inline constexpr int RingDepth(Ring r) {
  return r == Ring::kSmall ? kSmallSlots : r == Ring::kMedium ? kMediumSlots : kAreaSlots;
}

struct alignas(64) AreaCtl {
  alignas(64) std::atomic<uint64_t> read_through;  // last op id whose slot reads finished (ops finish in order)
  alignas(64) std::atomic<uint64_t> progress;      // (op id << 24) | chunks of this rank's share finished
  alignas(64) std::atomic<uint64_t> finished;      // last op id this rank finished (peers may reuse buffers)
  alignas(64) std::atomic<uint64_t> consumed;      // (op id << 24) | pipe steps whose peer stages this rank has read
};
static_assert(sizeof(AreaCtl) == 256);

struct SlotHeader {
  std::atomic<uint64_t> id;  // op id whose data the slot holds
  uint64_t sig;              // collective signature word
  uint64_t count;            // signature count
  uint32_t bytes;            // payload bytes in the slot (capped; read accounting only)
  // A hash of the signatures of this rank's earlier operations on the area.
  // A peer compares it with its own: operations in which no rank reads
  // another's slot (a broadcast whose ranks name different roots) cannot
  // compare signatures when they run, so a disagreement shows here, at the
  // next operation that reads.
  uint32_t history;
};
static_assert(sizeof(SlotHeader) == 32);

inline constexpr size_t kAreaCtlBytes = 256;
// Payload a small slot holds, and a medium one.
inline constexpr size_t kSmallSlotPayload = kSmallSlotStride - sizeof(SlotHeader);
inline constexpr size_t kMediumSlotPayload = kMediumSlotStride - sizeof(SlotHeader);
// The ring of an operation whose ranks publish at most `payload` bytes.
inline constexpr Ring RingFor(size_t payload) {
  return payload <= kSmallSlotPayload ? Ring::kSmall : payload <= kMediumSlotPayload ? Ring::kMedium : Ring::kFull;
}
inline constexpr int kProgressShift = 24;
inline constexpr uint64_t kProgressMask = (uint64_t{1} << kProgressShift) - 1;

// A slot holds at least this much, whatever CHOIR_SHM_SLOT_BYTES says: the
// large-message algorithms publish buffer addresses (and small tables) in it.
inline constexpr size_t kSlotMinCapacity = 4096;
inline size_t SlotCapacity(size_t slot_bytes) { return slot_bytes > kSlotMinCapacity ? slot_bytes : kSlotMinCapacity; }

// Distance between two slots: header and payload, 64-byte aligned.
inline size_t SlotStride(size_t slot_bytes) { return (sizeof(SlotHeader) + SlotCapacity(slot_bytes) + 63) / 64 * 64; }

// Bytes of one rank's area for `slot_bytes` of payload per slot and a pipe
// of `pipe_bytes`.
inline size_t AreaBytes(size_t slot_bytes, size_t pipe_bytes) {
  return kAreaCtlBytes + kAreaSlots * SlotStride(slot_bytes) + kSmallSlots * kSmallSlotStride +
         kMediumSlots * kMediumSlotStride + pipe_bytes;
}

// A view of one rank's area (own or a peer's).
class AreaView {
 public:
  AreaView() = default;
  AreaView(uint8_t* base, size_t slot_bytes, size_t pipe_bytes)
      : base_(base), slot_bytes_(slot_bytes), pipe_bytes_(pipe_bytes), slot_stride_(transport::SlotStride(slot_bytes)) {}

  AreaCtl* ctl() const { return reinterpret_cast<AreaCtl*>(base_); }
  SlotHeader* slot(int b) const {
    return reinterpret_cast<SlotHeader*>(base_ + kAreaCtlBytes + static_cast<size_t>(b) * slot_stride_);
  }
  uint8_t* data(int b) const { return reinterpret_cast<uint8_t*>(slot(b)) + sizeof(SlotHeader); }
  SlotHeader* small_slot(int b) const {
    return reinterpret_cast<SlotHeader*>(small_ring() + static_cast<size_t>(b) * kSmallSlotStride);
  }
  SlotHeader* medium_slot(int b) const {
    return reinterpret_cast<SlotHeader*>(medium_ring() + static_cast<size_t>(b) * kMediumSlotStride);
  }
  // Slot b (below the ring's depth) of ring r.
  SlotHeader* ring_slot(Ring r, int b) const {
    return r == Ring::kSmall ? small_slot(b) : r == Ring::kMedium ? medium_slot(b) : slot(b);
  }
  uint8_t* ring_data(Ring r, int b) const { return reinterpret_cast<uint8_t*>(ring_slot(r, b)) + sizeof(SlotHeader); }
  // Payload limit of the small-message algorithms (CHOIR_SHM_SLOT_BYTES).
  size_t slot_bytes() const { return slot_bytes_; }
  // What a slot can hold (at least kSlotMinCapacity).
  size_t slot_capacity() const { return SlotCapacity(slot_bytes_); }
  // 64-byte aligned.
  uint8_t* pipe() const { return medium_ring() + kMediumSlots * kMediumSlotStride; }
  size_t pipe_bytes() const { return pipe_bytes_; }
  bool valid() const { return base_ != nullptr; }

 private:
  uint8_t* small_ring() const { return base_ + kAreaCtlBytes + kAreaSlots * slot_stride_; }
  uint8_t* medium_ring() const { return small_ring() + kSmallSlots * kSmallSlotStride; }
  uint8_t* base_ = nullptr;
  size_t slot_bytes_ = 0;
  size_t pipe_bytes_ = 0;
  size_t slot_stride_ = 0;  // SlotStride(slot_bytes_), worked out once (every call finds its slots)
};

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_SHM_LOCAL_AREA_H_
