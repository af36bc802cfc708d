// Communicator: a group of ranks and the collectives they run together.
//
// Create one per process with Communicator::Create (from a Store, a rank and a
// size) or Communicator::FromEnvironment (the variables `choir run` and
// torchrun set). Every collective returns a Work at once; small collectives
// issued on an idle communicator complete before the call returns (no thread
// hand-off), larger ones run on the communicator's progress thread. Operations
// run in the order they are issued.
//
// Buffers: counts are in elements of `dtype`. A collective is in-place when
// the send and receive pointers are equal (for ReduceScatter/Allgather/Gather/
// Scatter: when the rank's own block of the large buffer is the small buffer).
// Buffers must stay valid and untouched until the Work completes.
//
// Errors: every collective has a deadline (CHOIR_TIMEOUT or CallOptions).
// The first error on a communicator is sticky: later calls fail at once with
// it, and it is propagated to the peers so that no rank hangs.
//
// Thread-safety: all methods may be called from any thread; operations are
// ordered by the time the call enters the communicator.
#ifndef CHOIR_COMMUNICATOR_H_
#define CHOIR_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "choir/status.h"
#include "choir/store.h"
#include "choir/topology.h"
#include "choir/types.h"

namespace choir {

class Work;
namespace comm {
class CommImpl;
}

struct CommOptions {
  // Deadline for creation and the default for every collective; 0 = CHOIR_TIMEOUT.
  std::chrono::milliseconds timeout{0};
  // Distinguishes communicators sharing one store (key prefix); must be equal on all ranks.
  std::string name = "world";
  // "auto", "tcp" or "shm"; empty = CHOIR_TRANSPORT.
  std::string transport;
  // Identity checked in every handshake; empty = CHOIR_JOB_ID.
  std::string job_id;
  // Host identity; empty = CHOIR_HOST_ID or detected (hostname + boot id).
  std::string host_id;
};

struct CallOptions {
  // Deadline of this call; 0 = the communicator's default.
  std::chrono::milliseconds timeout{0};
  // Force an algorithm by name (as printed by `choir perf`); empty = selection.
  std::string algorithm;
};

// Which algorithm a finished collective used, and how long it took.
struct WorkInfo {
  std::string algorithm;
  uint64_t sequence = 0;
  // This rank's time for the operation when `timed`. Collectives that run on
  // the calling thread (up to CHOIR_ASYNC_BYTES) are timed once per kind and
  // size class and then one call in CHOIR_TIME_ONE_IN (8; 1: every call);
  // the others have `timed` false and `seconds` 0. Other operations (and
  // alltoallv) are always timed, unless refused before they start (invalid
  // arguments, a communicator that already failed).
  double seconds = 0;
  bool timed = false;
  int source_rank = -1;  // for Recv from any source
  // This rank's same-host walk staged the chunks its peers read with
  // streaming stores (CHOIR_SHM_STAGING; each rank chooses for itself;
  // choir perf counts rank 0's such calls as "+stream").
  bool streaming_stages = false;
};

class Work {
 public:
  Work() = default;  // an empty handle: Done() is true, status() is OK
  // Blocks until the operation finishes (its own deadline bounds the wait).
  Status Wait() const;
  // Blocks at most `timeout`. CollectiveTimeout if still running (the operation
  // continues and finishes or fails under its own deadline).
  Status WaitFor(std::chrono::milliseconds timeout) const;
  bool Done() const;
  // The result when done; OK while running.
  Status status() const;
  WorkInfo info() const;
  // Calls `callback` with the final status once the operation finishes: at once
  // (on this thread) if it already has, otherwise on the thread that completes
  // it. Wait() returns only after callbacks registered before completion ran.
  // The callback must not block: Wait() or WaitFor() of an unfinished Work of
  // the same communicator in a callback that runs on the completing thread
  // returns InvalidArgument at once (that thread is the one that would run it).
  // It may issue new operations. An exception from a callback on the completing
  // thread is logged and dropped.
  void Then(std::function<void(const Status&)> callback) const;
  // Lets the communicator's progress thread start its queued operations,
  // this one among them, as soon as the engine is free. A rank whose
  // progress thread has no CPU of its own (bound to one CPU, or the host's
  // ranks with their progress threads outnumber the CPUs, as unbound ranks
  // on a small host do) otherwise leaves a queued operation 100 us (up to a
  // millisecond while its progress thread sleeps on its timer) to a caller
  // that may Wait() for it and so run it on its own thread, which saves the
  // two context switches of a hand-off. Call it when the result will be
  // taken through Then() or polled with Done(); WaitFor() does it itself.
  // Does nothing for an operation that is done or ran inline, or on other
  // ranks.
  void Start() const;

  struct State;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  // Joins the communicator of `size` ranks as `rank`; every rank must call this
  // with the same store, size and options.name.
  static Result<std::unique_ptr<Communicator>> Create(std::shared_ptr<Store> store, int rank,
                                                      int size, const CommOptions& options = {});
  // Reads RANK, WORLD_SIZE and the store address (CHOIR_STORE_ADDR, or
  // MASTER_ADDR and MASTER_PORT+1) and connects to the store.
  static Result<std::unique_ptr<Communicator>> FromEnvironment(const CommOptions& options = {});

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // The sticky error, or OK.
  Status status() const;
  // "world", or "world/split0/color3" for sub-communicators.
  const std::string& name() const;
  // Hosts, groups inside hosts, each rank's place and the link classes this
  // communicator's algorithm selection uses: from CHOIR_TOPO_FILE when set,
  // else detected on every rank and exchanged at creation.
  const Topology& topology() const;

  // recv[i] = op over ranks of send[i], on every rank.
  Work Allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                 const CallOptions& options = {});
  // send holds size()*recv_count elements; rank r receives the reduction of block r.
  Work ReduceScatter(const void* send, void* recv, size_t recv_count, DataType dtype, ReduceOp op,
                     const CallOptions& options = {});
  // recv holds size()*send_count elements: block r is rank r's send.
  Work Allgather(const void* send, void* recv, size_t send_count, DataType dtype,
                 const CallOptions& options = {});
  // Variable counts: rank r contributes recv_counts[r] elements; recv holds their
  // sum, blocks in rank order. send_count must equal recv_counts[rank()].
  Work AllgatherV(const void* send, size_t send_count, void* recv,
                  std::span<const size_t> recv_counts, DataType dtype,
                  const CallOptions& options = {});
  // root's send is copied into every rank's recv (send may equal recv; non-roots'
  // send is ignored and may be null).
  Work Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                 const CallOptions& options = {});
  // recv on root = op over ranks of send (recv ignored elsewhere, may be null).
  Work Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
              const CallOptions& options = {});
  // recv on root holds size()*send_count elements (ignored elsewhere).
  Work Gather(const void* send, void* recv, size_t send_count, DataType dtype, int root,
              const CallOptions& options = {});
  // root's send holds size()*recv_count elements; block r goes to rank r.
  Work Scatter(const void* send, void* recv, size_t recv_count, DataType dtype, int root,
               const CallOptions& options = {});
  // Block j of rank i's send lands in block i of rank j's recv; blocks of `count`.
  Work Alltoall(const void* send, void* recv, size_t count, DataType dtype,
                const CallOptions& options = {});
  // Uneven splits: send_counts[j] elements go to rank j, recv_counts[i] come from
  // rank i; blocks are contiguous in rank order. In-place (send == recv) needs
  // send_counts == recv_counts.
  Work AlltoallV(const void* send, std::span<const size_t> send_counts, void* recv,
                 std::span<const size_t> recv_counts, DataType dtype,
                 const CallOptions& options = {});
  Work Barrier(const CallOptions& options = {});
  // Point-to-point. Matching is by (peer, tag) in issue order. peer = kAnySource
  // in Recv takes the first matching message from any rank (see WorkInfo);
  // receives from any source match in the order they were posted.
  // Sends and receives progress independently: the call returns once the
  // transfer is posted, and one that cannot finish yet (no message yet, or a
  // large send the peer has not taken) stays pending while later operations
  // run, so both ranks may post a Recv before their Send. Pending transfers
  // move when another Send or Recv runs, while a thread waits for one, and on
  // the progress thread; a collective first waits for them to finish
  // (docs/protocols.md, "Point-to-point progress").
  static constexpr int kAnySource = -1;
  Work Send(const void* buf, size_t count, DataType dtype, int peer, int tag = 0,
            const CallOptions& options = {});
  Work Recv(void* buf, size_t count, DataType dtype, int peer, int tag = 0,
            const CallOptions& options = {});

  // Ranks with the same color form a new communicator, ordered by (key, old rank).
  // A negative color joins no group: the result is OK with a null pointer.
  // Collective over this communicator.
  Result<std::unique_ptr<Communicator>> Split(int color, int key,
                                              const CommOptions& options = {});

  // Fails every pending and future operation with Aborted (or `reason`) and tells
  // the peers, whose operations then fail instead of waiting for this rank.
  void Abort(const std::string& reason = "");

 private:
  explicit Communicator(std::unique_ptr<comm::CommImpl> impl);
  std::unique_ptr<comm::CommImpl> impl_;
};

}  // namespace choir

#endif  // CHOIR_COMMUNICATOR_H_
