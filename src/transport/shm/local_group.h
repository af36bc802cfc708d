// The ranks of one communicator that share this host's memory, as seen by the
// same-host algorithms (algorithms/shm_flat.cc, algorithms/cma_*.cc).
//
// Exists only when every local rank shares memory with every other local
// rank (CHOIR_TRANSPORT forcing tcp on one of them breaks the group up).
//
// Thread-safety: used by the thread running the current operation.
#ifndef CHOIR_TRANSPORT_SHM_LOCAL_GROUP_H_
#define CHOIR_TRANSPORT_SHM_LOCAL_GROUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "transport/shm/local_area.h"
#include "transport/shm/segment.h"
#include "transport/shm/shared_buffers.h"

namespace choir::transport {

struct LocalGroup {
  std::vector<int> ranks;               // communicator ranks on this host, ascending
  int index = -1;                       // this rank's position in `ranks`
  std::vector<AreaView> areas;          // by local index (own included)
  std::vector<SegmentHeader*> headers;  // segment headers by local index (doorbells)
  std::vector<int> pids;                // by local index
  bool cma = false;                     // process_vm_readv works between every pair
  bool ranks_share_cpus = false;        // more local ranks than CPUs for them (ConnectOptions)
  std::string tuning;                   // switch-point table, equal on every local rank (ConnectOptions)
  size_t pipe_cache_bytes = 0;          // smallest L2 of the local ranks: bounds shm_pipe's chunks
  uint64_t next_id = 1;                 // area operation counter, equal on every local rank
  // What this rank knows, without reading shared lines again, of how far
  // every local peer has finished reading: every peer finished reading the
  // slots of every operation up to `read_by_all`. Raised by AreaOp::WaitAll
  // (a rank publishes operation k only after it finished reading the slots
  // of k-1, so seeing k from everyone proves k-1 read) and by the
  // read_through values AreaOp::Acquire had to read.
  uint64_t read_by_all = 0;
  uint32_t history = 0;                 // SlotHeader::history of this rank's next operation
  // Steps staged into each local rank's pipe so far (shm_pipe.cc), by local
  // index, equal on every local rank: a walk stages into a pipe from the
  // position after the one its last step there used.
  std::vector<uint64_t> pipe_steps;
  PeerBufferMaps peer_buffers;          // local peers' SharedBuffers mapped here

  int size() const { return static_cast<int>(ranks.size()); }
  const AreaView& mine() const { return areas[static_cast<size_t>(index)]; }
  // Wakes every local peer that sleeps (after publishing area state).
  void NotifyPeers() const {
    for (size_t i = 0; i < headers.size(); ++i) {
      if (static_cast<int>(i) != index) NotifySegment(headers[i]);
    }
  }
};

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_SHM_LOCAL_GROUP_H_
