// memory_ceiling: the fastest any same-host collective can be on this
// machine, measured. N processes each run the least memory work one rank of
// a collective must do — every input byte read once from memory, every output
// byte written once (with the faster kind of store), exchanged data taken
// from a cache —
// on private buffers, at the same time, with choir's own copy and reduce
// kernels, and no communication at all. The slowest process's time per
// iteration gives the bus bandwidth nccl-tests would report for it. With
// more processes than CPUs each one times an iteration from the moment the
// last one arrived at the barrier before it, so that the slowest time spans
// all of their work on the shared CPUs.
//
//   bin/choir_memory_ceiling [--ranks 2] [--sizes 16M,64M,256M] [--iters 10]
//       [--ops allreduce,reduce_scatter,allgather,allgather_cma] [--json FILE]
//
// Per rank, for a buffer of N bytes (nccl-tests' convention: the per-rank
// buffer of allreduce, the whole buffer of reduce_scatter and allgather):
//   allreduce       read N (its input), write N (its output)
//   reduce_scatter  read N, write N/n (its block, combined from n sources)
//   allgather       read N/n (its block, once), write N (n copies of it,
//                   chunk by chunk from the cache)
// Each row is timed twice, writing with streaming stores and with plain ones
// (which keep outputs that fit the caches there), and reports the faster
// ("stores"). A collective that also moves data between processes can only
// be slower.
//
// One more row is not a ceiling but a floor of its own: allgather_cma, an
// allgather of ordinary (heap) buffers that moves every peer byte once
// through the kernel, as choir's cma and the MPIs' cross-memory attach do —
// each rank copies its block into its output and process_vm_readv's every
// peer's block straight out of that peer's input, all ranks at once, with
// no synchronization. No single-copy heap allgather can beat it.
//
// --json FILE also writes the rows as {"ranks", "iters", "isa", "results":
// [{"op", "bytes", "time_us", "busbw_gbps", "stores"}]} (a failed row
// has "refused": true and no figures); benchmarks/compare reads it.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "algorithms/local_ops.h"
#include "base/json_text.h"
#include "base/strings.h"
#include "kernels/reduce.h"

namespace {

using choir::DataType;
using choir::ReduceOp;
using choir::kernels::CopyBytes;
using choir::kernels::ReduceMany;

constexpr size_t kChunk = 256 * 1024;  // fits the L2 cache

struct Shared {
  std::atomic<int> arrived;
  std::atomic<int> released;         // the last round every process reached
  std::atomic<int64_t> released_ns;  // when it was reached (steady clock, the same in every process)
  std::atomic<int> pid[64];
  std::atomic<uint64_t> input[64];  // each rank's input address (allgather_cma)
  double seconds[2][64][256];  // [plain, streaming][rank][iteration]
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Returns when all `ranks` processes reached round `round`, with the time the
// last one arrived. With more processes than CPUs the waiting ones yield, so
// that the ones still working get the CPUs.
int64_t Barrier(Shared* s, int ranks, int round, bool yield) {
  if (s->arrived.fetch_add(1) + 1 == ranks * round) {
    s->released_ns.store(NowNs());
    s->released.store(round);  // after the time: whoever sees the round reads its time
  }
  while (s->released.load() < round) {
    if (yield) sched_yield();
  }
  return s->released_ns.load();  // not overwritten before this process reaches the next round
}

// One rank's least work for `op` on `bytes`, writing its output with
// streaming stores or plain ones (allgather_cma: its own rule).
bool Work(const std::string& op, int n, int rank, size_t bytes, const uint8_t* in, uint8_t* out, Shared* s,
          bool streaming) {
  const size_t block = bytes / static_cast<size_t>(n) / 64 * 64;
  if (op == "allgather_cma") {
    CopyBytes(out + static_cast<size_t>(rank) * block, in, block,
              /*nontemporal=*/block >= choir::algorithms::kStreamingBytes);
    for (int k = 1; k < n; ++k) {
      const int p = (rank + k) % n;
      if (!choir::algorithms::ReadRemote(s->pid[p].load(), p, out + static_cast<size_t>(p) * block, s->input[p].load(),
                                         block).ok()) {
        return false;
      }
    }
    return true;
  }
  if (op == "allreduce") {
    CopyBytes(out, in, bytes, streaming);
  } else if (op == "reduce_scatter") {
    std::vector<const void*> srcs(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) srcs[static_cast<size_t>(p)] = in + static_cast<size_t>(p) * block;
    ReduceMany(out, srcs.data(), n, block / 4, DataType::kFloat32, ReduceOp::kSum, streaming);
  } else {  // allgather
    for (size_t done = 0; done < block; done += kChunk) {
      const size_t m = std::min(kChunk, block - done);
      for (int p = 0; p < n; ++p) CopyBytes(out + static_cast<size_t>(p) * block + done, in + done, m, streaming);
    }
  }
  return true;
}

double BusFactor(const std::string& op, int n) {
  return op == "allreduce" ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;  // allgather(_cma), reduce_scatter
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2;
  int iters = 10;
  std::string sizes = "16M,64M,256M";
  std::string ops = "allreduce,reduce_scatter,allgather,allgather_cma";
  std::string json_path;
  const char* usage =
      "usage: %s [--ranks N] [--sizes 16M,64M,256M] [--iters N] "
      "[--ops allreduce,reduce_scatter,allgather,allgather_cma] [--json FILE]\n";
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(usage, argv[0]);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: flag '%s' needs a value\n", argv[0], flag.c_str());
      return 2;
    }
    if (flag == "--ranks") {
      ranks = std::atoi(argv[i + 1]);
    } else if (flag == "--iters") {
      iters = std::atoi(argv[i + 1]);
    } else if (flag == "--sizes") {
      sizes = argv[i + 1];
    } else if (flag == "--ops") {
      ops = argv[i + 1];
    } else if (flag == "--json") {
      json_path = argv[i + 1];
      if (json_path.empty()) {
        std::fprintf(stderr, "%s: --json needs a file name\n", argv[0]);
        return 2;
      }
    } else {
      std::fprintf(stderr, usage, argv[0]);
      return 2;
    }
  }
  if (ranks < 2 || ranks > 64 || iters < 1 || iters > 255) {
    std::fprintf(stderr, "--ranks must be 2..64 and --iters 1..255\n");
    return 2;
  }
  const std::vector<std::string> op_list = choir::strings::Split(ops, ',');
  for (const std::string& op : op_list) {
    if (op != "allreduce" && op != "reduce_scatter" && op != "allgather" && op != "allgather_cma") {
      std::fprintf(stderr, "unknown op '%s' (allreduce, reduce_scatter, allgather, allgather_cma)\n", op.c_str());
      return 2;
    }
  }
  // Opened first: a path that cannot be written fails before the run.
  std::FILE* json_file = nullptr;
  if (!json_path.empty() && (json_file = std::fopen(json_path.c_str(), "w")) == nullptr) {
    std::fprintf(stderr, "cannot write %s: %s\n", json_path.c_str(), std::strerror(errno));
    return 1;
  }
  const bool yield = ranks > static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();  // --json "results"
  std::printf("# memory ceiling: %d processes, kernels %s; busbw as nccl-tests, median over %d iterations (slowest process)\n",
              ranks, choir::kernels::ActiveIsa(), iters);
  std::printf("# %-15s %12s %10s %10s  %s\n", "op", "bytes", "time(us)", "busbw", "stores");
  for (const std::string& op : op_list) {
    for (const std::string& text : choir::strings::Split(sizes, ',')) {
      auto parsed = choir::strings::ParseBytes(text);
      if (!parsed || *parsed < 4096) {
        std::fprintf(stderr, "bad size '%s'\n", text.c_str());
        return 2;
      }
      const size_t bytes = *parsed;
      auto* s = static_cast<Shared*>(
          mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
      if (s == MAP_FAILED) return 1;
      new (&s->arrived) std::atomic<int>(0);
      new (&s->released) std::atomic<int>(0);
      new (&s->released_ns) std::atomic<int64_t>(0);
      const int kinds = op == "allgather_cma" ? 1 : 2;  // allgather_cma writes as choir's cma does: timed once
      std::vector<pid_t> children;
      for (int r = 0; r < ranks; ++r) {
        const pid_t pid = fork();
        if (pid == 0) {
          auto* in = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
          auto* out = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
          // Without its buffers a process still reaches every barrier (the
          // others would wait for it forever), does no work, and fails.
          const bool have = in != nullptr && out != nullptr;
          if (have) {
            std::memset(in, 1, bytes);
            std::memset(out, 0, bytes);
          }
          s->pid[r].store(getpid());
          s->input[r].store(reinterpret_cast<uint64_t>(in));
          bool ok = true;
          int round = 0;
          for (int kind = 0; kind < kinds; ++kind) {
            for (int it = 0; it <= iters; ++it) {  // iteration 0 warms up
              // With more processes than CPUs a process may get a CPU only
              // after others on it have worked: it times from the release of
              // the barrier, as a collective's slowest rank would, not from
              // when it got the CPU. Otherwise from when it started: every
              // process spins in the barrier and starts a cache line's trip
              // after the release, unless something else on the machine
              // holds its CPU (a wait the oversubscribed timing would count).
              const int64_t released = Barrier(s, ranks, ++round, yield);
              const int64_t t0 = yield ? released : NowNs();
              ok = have && Work(op, ranks, r, bytes, in, out, s, /*streaming=*/kind == 1) && ok;
              const double took = static_cast<double>(NowNs() - t0) * 1e-9;
              if (it > 0) s->seconds[kind][r][it - 1] = took;
            }
          }
          // Peers may still read this rank's input: leave together.
          Barrier(s, ranks, ++round, yield);
          _exit(!have ? 4 : (ok ? 0 : 3));
        }
        children.push_back(pid);
      }
      bool failed = false, no_memory = false;
      for (pid_t pid : children) {
        int status = 0;
        waitpid(pid, &status, 0);
        failed = failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        no_memory = no_memory || (WIFEXITED(status) && WEXITSTATUS(status) == 4);
      }
      if (failed) {
        std::printf("  %-15s %12zu %10s %10s  (%s)\n", op.c_str(), bytes, "-", "-",
                    no_memory                  ? "a process could not allocate its two buffers"
                    : op == "allgather_cma" ? "process_vm_readv refused here"
                                            : "a process failed");
        rows.push_back({{"op", op}, {"bytes", bytes}, {"refused", true}});
        munmap(s, sizeof(Shared));
        continue;
      }
      // Per kind, the median over iterations of the slowest process; the faster kind.
      double t = 0;
      int best = 0;
      for (int kind = 0; kind < kinds; ++kind) {
        std::vector<double> slowest(static_cast<size_t>(iters));
        for (int it = 0; it < iters; ++it) {
          for (int r = 0; r < ranks; ++r) {
            slowest[static_cast<size_t>(it)] = std::max(slowest[static_cast<size_t>(it)], s->seconds[kind][r][it]);
          }
        }
        std::sort(slowest.begin(), slowest.end());
        const double median = slowest[slowest.size() / 2];
        if (kind == 0 || median < t) {
          t = median;
          best = kind;
        }
      }
      const char* stores = op == "allgather_cma" ? "kernel" : (best == 1 ? "streaming" : "plain");
      const double busbw = static_cast<double>(bytes) / t * BusFactor(op, ranks) / 1e9;
      std::printf("  %-15s %12zu %10.1f %10.3f  %s\n", op.c_str(), bytes, t * 1e6, busbw, stores);
      rows.push_back({{"op", op}, {"bytes", bytes}, {"time_us", t * 1e6}, {"busbw_gbps", busbw}, {"stores", stores}});
      std::fflush(stdout);
      munmap(s, sizeof(Shared));
    }
  }
  if (json_file != nullptr) {
    const nlohmann::ordered_json doc = {
        {"ranks", ranks}, {"iters", iters}, {"isa", choir::kernels::ActiveIsa()}, {"results", rows}};
    const bool written = std::fputs((choir::JsonDump(doc, 2) + "\n").c_str(), json_file) >= 0;
    if (std::fclose(json_file) != 0 || !written) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
