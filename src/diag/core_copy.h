// How fast one CPU copies data another CPU has just written, next to the
// same copy of data it wrote itself: the cost of every same-host collective
// that passes data between its ranks through the caches (shm_pipe, the
// slots). On a VM whose virtual CPUs move between cores that share a cache
// and cores that do not, the first figure changed 3x from launch to launch
// while the second stayed (docs/performance-log.md, "The pipe for every large
// collective, and launches at a third of the speed"): `choir doctor`
// measures both so that a slow run can be told from a slow placement.
//
// Thread-safety: runs two threads of its own; call from one thread.
#ifndef CHOIR_DIAG_CORE_COPY_H_
#define CHOIR_DIAG_CORE_COPY_H_

#include <cstddef>
#include <string>

namespace choir::diag {

struct CoreCopy {
  bool measured = false;
  std::string why_not;      // when not measured
  int writer_cpu = -1;      // the CPU that writes each chunk
  int reader_cpu = -1;      // the CPU that copies it out and is timed
  double cross_gbps = 0;    // copying chunks the writer has just written
  double own_gbps = 0;      // copying chunks the reader has just written itself
};

// Copies `rounds` chunks of `chunk_bytes` between the first two CPUs this
// process may run on (its affinity), with choir's copy kernel, and reports
// the median chunk's speed; 5-15 ms with the defaults. Not measured with
// fewer than two CPUs.
CoreCopy MeasureCoreCopy(size_t chunk_bytes = 128 * 1024, int rounds = 1000);

}  // namespace choir::diag

#endif  // CHOIR_DIAG_CORE_COPY_H_
