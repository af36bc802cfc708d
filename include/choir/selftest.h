// A correctness sweep over every collective, data type and reduce op, with
// results checked against values computed independently of the library.
//
// Used by `choir sweep` (the job `choir run` starts by default), by `choir
// probe`, and by the test suite. Every rank must call RunSweep with the same
// options: the sweep issues the same collectives in the same order on all
// ranks, and after each case the ranks agree (through one more collective)
// whether every rank's whole output was right.
//
// Thread-safety: RunSweep uses the communicator like any other caller.
#ifndef CHOIR_SELFTEST_H_
#define CHOIR_SELFTEST_H_

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "choir/communicator.h"
#include "choir/shared_buffer.h"

namespace choir {

struct SweepOptions {
  // Collectives by name: allreduce, reduce_scatter, allgather, allgatherv,
  // broadcast, reduce, gather, scatter, alltoall, alltoallv, barrier, sendrecv.
  // Empty: all of them.
  std::vector<std::string> ops;
  std::vector<DataType> dtypes;      // empty: all eight
  std::vector<size_t> counts = {0, 1, 2, 3, 7, 33, 1000, 4099, 70001};
  bool in_place = true;              // run each case in place
  bool out_of_place = true;          // and out of place (always, for ops with no in-place form or neither set)
  bool all_reduce_ops = true;        // every applicable reduce op (else sum only)
  std::vector<ReduceOp> reduce_ops;  // if set: exactly these (where applicable)
  std::string algorithm;             // force an algorithm (CallOptions::algorithm)
  // Root of broadcast, reduce, gather and scatter: a rank of the
  // communicator, or -1 to take the ranks in turn from case to case.
  int root = -1;
  bool shared_buffers = false;       // buffers from choir::SharedBuffer instead of the heap
  std::chrono::milliseconds timeout{0};  // per collective; 0 = communicator default
  bool stop_on_failure = false;
};

struct SweepCase {
  std::string op;
  std::string dtype;
  std::string reduce_op;  // "" when the collective does not reduce
  size_t count = 0;
  bool in_place = false;
  std::string algorithm;
  int root = -1;          // the root of a broadcast, reduce, gather or scatter; -1 for the others
  bool ok = false;        // every rank's output matched the reference
  double seconds = 0;     // this rank's time for the collective
  std::string error;      // first problem seen on this rank ("" when ok)
};

// Runs the sweep. A collective that fails (error status) ends the sweep with
// that status, since the communicator is then unusable; wrong values are
// reported per case and the sweep goes on.
Result<std::vector<SweepCase>> RunSweep(Communicator& comm, const SweepOptions& options);

}  // namespace choir

#endif  // CHOIR_SELFTEST_H_
