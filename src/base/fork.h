// Telling a forked child from the process that made an object.
//
// A communicator's threads, sockets, shared segments and registry files
// belong to the process that created it. A child forked from that process
// has a copy of the object but none of the threads; if it ran collectives,
// both processes would be matched against the same peer operations, and its
// teardown would close or remove what the parent still uses.
//
// Thread-safety: both functions are safe from any thread.
#ifndef CHOIR_BASE_FORK_H_
#define CHOIR_BASE_FORK_H_

#include <atomic>
#include <cstdint>

namespace choir {

namespace internal {
extern std::atomic<uint64_t> fork_generation;
}  // namespace internal

// Starts counting forks (once per process; call before relying on
// ForkGeneration) and returns the current count.
uint64_t WatchForks();

// How many times this process was forked from the one that first called
// WatchForks (0 there): a value that differs from the one an object recorded
// at creation means this is a forked child. One relaxed load.
inline uint64_t ForkGeneration() { return internal::fork_generation.load(std::memory_order_relaxed); }

}  // namespace choir

#endif  // CHOIR_BASE_FORK_H_
