#include "base/fork.h"

#include <pthread.h>

namespace choir {
namespace internal {
std::atomic<uint64_t> fork_generation{0};
}  // namespace internal

uint64_t WatchForks() {
  // The handler runs in the child only, before fork() returns there.
  static const bool watching = [] {
    return pthread_atfork(nullptr, nullptr,
                          [] { internal::fork_generation.fetch_add(1, std::memory_order_relaxed); }) == 0;
  }();
  (void)watching;  // without the handler the count stays 0: no child is told apart
  return ForkGeneration();
}

}  // namespace choir
