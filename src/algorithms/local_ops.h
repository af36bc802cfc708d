// Building blocks of the same-host algorithms (shm_flat.cc, cma.cc): one
// "area operation" on the host's shared slots, as every local rank runs it.
//
//   AreaOp op(ctx);                 // next id, slot parity
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
#include <string>

#include "algorithms/context.h"
#include "transport/shm/local_group.h"

namespace choir::algorithms {

// True when the context covers exactly this host's local group (every rank of
// the communicator is local), which the same-host algorithms require.
bool LocalGroupUsable(const Context& c);

class AreaOp {
 public:
  explicit AreaOp(Context& c);

  Status Acquire();
  uint8_t* my_data() const { return group_->mine().data(parity_); }
  size_t slot_bytes() const { return group_->mine().slot_bytes(); }
  void Publish(uint64_t bytes);
  Status WaitFor(int local_index);
  Status WaitAll();
  const uint8_t* data(int local_index) const {
    return group_->areas[static_cast<size_t>(local_index)].data(parity_);
  }
  uint64_t bytes(int local_index) const {
    return group_->areas[static_cast<size_t>(local_index)].slot(parity_)->bytes;
  }
  void FinishReads();

  // Large operations.
  void SetProgress(uint64_t chunks_done);
  Status WaitProgress(int local_index, uint64_t chunks);
  // Marks this rank done and waits until every peer is done too.
  Status Finish();

  int me() const { return group_->index; }
  int size() const { return group_->size(); }
  int pid(int local_index) const { return group_->pids[static_cast<size_t>(local_index)]; }
  uint64_t id() const { return id_; }
  Context& ctx() const { return *ctx_; }

 private:
  Status Wait(const std::function<bool()>& ready, const std::function<std::string()>& what);
  Status CheckSignature(int local_index) const;

  Context* ctx_;
  transport::LocalGroup* group_;
  uint64_t id_;
  int parity_;
};

// Reads `bytes` at `remote` in process `pid` into `local` (process_vm_readv,
// looping over partial reads). PeerLost when the process is gone.
Status ReadRemote(int pid, int peer_rank, void* local, uint64_t remote, size_t bytes);

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_LOCAL_OPS_H_
