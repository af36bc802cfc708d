#include "diag/core_copy.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "kernels/reduce.h"
#include "topology/machine.h"

namespace choir::diag {
namespace {

// Waits until `ready()`, handing the CPU over now and then: should both
// threads end up on one CPU, each still gets to run.
template <typename F>
void SpinUntil(F ready) {
  for (uint32_t spins = 1; !ready(); ++spins) {
    if (spins % 4096 == 0) std::this_thread::yield();
  }
}

bool PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

struct PageFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Pages = std::unique_ptr<uint8_t, PageFree>;

// Page-aligned, so that no copy runs between addresses a few bytes apart
// modulo 4 KiB (which this copy avoids anyway, kernels::CopyBytes).
Pages Allocate(size_t bytes) { return Pages(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes))); }

}  // namespace

CoreCopy MeasureCoreCopy(size_t chunk_bytes, int rounds) {
  CoreCopy out;
  rounds = std::max(rounds, 1);
  std::vector<int> cpus;
  if (!topology::AffinityCpus(&cpus) || cpus.size() < 2) {
    out.why_not = "this process may run on one CPU only";
    return out;
  }
  chunk_bytes = (chunk_bytes + 4095) / 4096 * 4096;
  Pages shared = Allocate(2 * chunk_bytes), src = Allocate(chunk_bytes), dst = Allocate(chunk_bytes),
        own = Allocate(chunk_bytes);
  if (!shared || !src || !dst || !own) {
    out.why_not = "out of memory";
    return out;
  }
  std::fill(src.get(), src.get() + chunk_bytes, uint8_t{1});
  std::fill(dst.get(), dst.get() + chunk_bytes, uint8_t{0});
  std::fill(shared.get(), shared.get() + 2 * chunk_bytes, uint8_t{0});
  out.writer_cpu = cpus[0];
  out.reader_cpu = cpus[1];
  std::atomic<int64_t> written{0};
  std::atomic<int64_t> read{0};
  std::atomic<bool> pinned_ok{true};
  std::thread writer([&] {
    if (!PinTo(out.writer_cpu)) pinned_ok = false;
    for (int64_t k = 0; k < rounds; ++k) {
      // Two chunks in turn: chunk k is written once the reader finished k - 2.
      SpinUntil([&] { return read.load(std::memory_order_acquire) >= k - 1; });
      kernels::CopyBytes(shared.get() + (k & 1) * chunk_bytes, src.get(), chunk_bytes, /*nontemporal=*/false);
      written.store(k + 1, std::memory_order_release);
    }
  });
  // Per-chunk times: their medians, so that a thread descheduled for a
  // moment does not decide the figure.
  std::vector<int64_t> cross_ns(static_cast<size_t>(rounds)), own_ns(static_cast<size_t>(rounds));
  std::thread reader([&] {
    if (!PinTo(out.reader_cpu)) pinned_ok = false;
    for (int64_t k = 0; k < rounds; ++k) {
      SpinUntil([&] { return written.load(std::memory_order_acquire) >= k + 1; });
      const int64_t t0 = NowNanos();
      kernels::CopyBytes(dst.get(), shared.get() + (k & 1) * chunk_bytes, chunk_bytes, /*nontemporal=*/false);
      cross_ns[static_cast<size_t>(k)] = NowNanos() - t0;
      read.store(k + 1, std::memory_order_release);
    }
    for (int64_t k = 0; k < rounds; ++k) {
      kernels::CopyBytes(own.get(), src.get(), chunk_bytes, /*nontemporal=*/false);  // written here
      const int64_t t0 = NowNanos();
      kernels::CopyBytes(dst.get(), own.get(), chunk_bytes, /*nontemporal=*/false);
      own_ns[static_cast<size_t>(k)] = NowNanos() - t0;
    }
  });
  writer.join();
  reader.join();
  if (!pinned_ok) {
    out.why_not = "could not bind the probe's threads to CPUs " + std::to_string(out.writer_cpu) + " and " +
                  std::to_string(out.reader_cpu);
    return out;
  }
  auto gbps = [&](std::vector<int64_t>& ns) {
    std::nth_element(ns.begin(), ns.begin() + static_cast<ptrdiff_t>(ns.size() / 2), ns.end());
    const int64_t median = ns[ns.size() / 2];
    return median > 0 ? static_cast<double>(chunk_bytes) / static_cast<double>(median) : 0.0;  // bytes/ns = GB/s
  };
  out.cross_gbps = gbps(cross_ns);
  out.own_gbps = gbps(own_ns);
  out.measured = out.cross_gbps > 0 && out.own_gbps > 0;
  if (!out.measured) out.why_not = "the clock did not advance";
  return out;
}

}  // namespace choir::diag
