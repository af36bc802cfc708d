// Memory the ranks of one host can read and write directly: the registry
// behind choir::SharedBuffer, and each communicator's mappings of its local
// peers' buffers.
//
// A shared buffer is a memfd mapped MAP_SHARED. Collectives publish, next to a
// buffer's address, where it lies in its shared buffer (SharedRef); a peer
// takes a duplicate of the owner's memfd with pidfd_getfd() (the permission
// process_vm_readv needs, so only where CHOIR_SHM_CMA allows it), maps it
// once and from then on reads and writes with plain loads and stores.
//
// Thread-safety: the registry functions may be called from any thread;
// a PeerBufferMaps is used by the thread running the current operation.
#ifndef CHOIR_TRANSPORT_SHM_SHARED_BUFFERS_H_
#define CHOIR_TRANSPORT_SHM_SHARED_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "choir/status.h"

namespace choir::transport {

// Where an address range lies in its owner's shared buffer. id 0: not shared.
struct SharedRef {
  uint64_t id = 0;     // unique in the owner process, never reused
  uint64_t base = 0;   // the buffer's address in the owner process
  uint64_t bytes = 0;  // the buffer's length
  int64_t fd = -1;     // the owner's memfd
  uint64_t inode = 0;  // the memfd's inode: proves a taken-over descriptor is still this buffer
};

// Creates a shared buffer of `bytes` (rounded up to whole pages), zero-filled
// and faulted in. ShmError when memory or file descriptors run out.
Result<void*> AllocateShared(size_t bytes);
// Unmaps and forgets a buffer from AllocateShared (no-op for null).
void ReleaseShared(void* data);
// The shared buffer containing all of [p, p + bytes), or id 0.
SharedRef FindShared(const void* p, size_t bytes);

// One communicator's mappings of its local peers' shared buffers. Keeps up to
// kMaxMappings (more only while one operation needs them), dropping the least
// recently used one first; the owner's memory stays allocated while a peer
// maps it.
class PeerBufferMaps {
 public:
  PeerBufferMaps() = default;
  ~PeerBufferMaps();
  PeerBufferMaps(const PeerBufferMaps&) = delete;
  PeerBufferMaps& operator=(const PeerBufferMaps&) = delete;

  // Starts an operation: mappings used from here on are not dropped before
  // the next call (the operation holds pointers into them).
  void NewOperation() { op_start_ = clock_ + 1; }
  // This process's view of `ref`'s buffer in process `pid` (mapped on first
  // use), or null when this kernel or sandbox does not let one process take
  // another's descriptor (then never tried again: the caller copies through
  // the kernel instead) or the peer is gone (the caller's copy reports it).
  // ShmError naming the peer when its descriptor is closed or is no longer
  // that buffer.
  Result<uint8_t*> Map(int pid, int peer_rank, const SharedRef& ref);
  size_t mapped() const { return entries_.size(); }

  static constexpr size_t kMaxMappings = 64;

 private:
  struct Entry {
    int pid;
    uint64_t id;
    uint8_t* base;
    size_t bytes;
    uint64_t last_use;
  };
  std::vector<Entry> entries_;
  std::map<int, int> pidfds_;  // pid -> pidfd
  uint64_t clock_ = 0;
  uint64_t op_start_ = 1;
  bool unavailable_ = false;  // pidfd_open/pidfd_getfd refused here
};

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_SHM_SHARED_BUFFERS_H_
