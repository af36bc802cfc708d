#include "algorithms/switch_points.h"

#include "algorithms/algorithms.h"
#include "algorithms/local_ops.h"
#include "params/params.h"
#include "topology/machine.h"

namespace choir::algorithms {
namespace {

constexpr size_t kKiB = 1024;
constexpr uint64_t kMiB = uint64_t{1} << 20;

// The Intel host: with single copy allowed, the slot payload above which cma
// wins, per collective and per whether the ranks share cores (cma's system
// calls and waits cost a shared core more, so the slots keep larger payloads
// there). Measured as busbw (mean time per call) with `choir perf -n 2|4
// --algo shm_flat|cma`, 4-512 KiB (docs/algorithms.md, "Switch points per
// host"). Measured again on 2026-12-06 (family 6 model 207), 5-7
// interleaved launches of 200-300 calls, median busbw, slots against cma:
// with heap buffers the slots won up to 64 KiB for reduce (11.7 against
// 7.61 GB/s at 64 KiB), reduce_scatter (4.38 against 3.69) and alltoall
// (4.93 against 4.83), and allgather to 32 KiB blocks (5.11 against 4.27);
// but cma reads SharedBuffers straight from their mappings, and there it
// won from 16 KiB, by 1.4x-2.3x at 64 KiB (reduce 20.1 against 11.9,
// reduce_scatter 12.2 against 5.4, allgather 8.94 against 4.92, alltoall
// 6.17 against 4.28). A rank knows only its own buffers' kind, and every
// rank must choose alike, so one limit serves both: reduce takes the slots
// to 64 KiB (in three `compare` runs heap 0.84x -> 1.06x-1.42x of the best
// peer at 64 KiB, SharedBuffer 2.13x -> 1.23x-1.45x); the others keep their
// limits, since there the heap's gain was smaller than the SharedBuffers'
// loss (allgather and alltoall at 64 KiB went from 1.64x and 1.65x of the
// best peer to 0.80x) (docs/performance-log.md, "The Intel host a third
// time").
size_t IntelFlatLimitWithCma(CollKind kind, bool shares_cpus) {
  switch (kind) {
    case CollKind::kAllreduce:
    case CollKind::kReduceScatter:
    case CollKind::kAlltoall:
      return (shares_cpus ? 32 : 16) * kKiB;
    case CollKind::kAllgather:
    case CollKind::kAllgatherV:
    case CollKind::kGather:
    case CollKind::kScatter:
      return 16 * kKiB;
    case CollKind::kBroadcast:
      return (shares_cpus ? 128 : 32) * kKiB;
    case CollKind::kReduce:
      return 64 * kKiB;
    default:
      return SIZE_MAX;  // barrier: no payload
  }
}

// The Intel host: where shm_pipe takes over from cma (bytes of the whole
// buffer). With a core per rank, cma's kernel copies run in parallel and won
// below 16 MiB for allreduce (1.5x at 4 MiB, 0.95-1.24x in three passes at
// 8 MiB) and below 64 MiB for allgather (1.0-1.4x at 8-16 MiB, even at
// 32 MiB); from there the pipe's single pass over memory won (allreduce
// 16 MiB 1.08-1.27x, allgather 64 MiB 1.27-1.30x). When the ranks share
// cores, cma's waits for its peers cost time slices and the pipe won from
// 1 MiB (allgather 4 MiB): docs/performance-log.md, "cma or shm_pipe".
// Reduce_scatter measured 1.38x faster with cma at 16 MiB then; after the
// pipe's later changes (2026-12-06, 5 interleaved launches, median busbw,
// pipe against cma) the pipe won from 4 MiB: 2 ranks 4.53 against 3.44 GB/s
// at 4 MiB, 3.43 against 2.88 at 64 MiB, 3.46 against 2.97 at 256 MiB
// (1 MiB level, 3.78 against 3.65); 4 ranks 2.46 against 2.00 at 4 MiB and
// 2.47 against 1.62 at 16 MiB. Those runs timed buffers 16 bytes past a
// cache line, where cma's combining stored across lines; since its stores
// start on a line and its scratch copies sit at the peer's offset within
// one (kernels' ReduceLoop, ReduceFromPeers), cma wins again with 2 ranks
// up to 16 MiB: 5.03-5.09 against 4.55 GB/s at 8-16 MiB with
// page-aligned buffers, 4.98-5.22 against 4.30-4.33 with buffers 16 bytes
// into a line; the pipe from 32 MiB (3.71 against 2.96; nothing was
// measured between 16 and 32 MiB). With 4 ranks on the 2 CPUs (sharing
// them) the pipe still wins from 4 MiB (2.19 against 2.03, 16 MiB 1.82
// against 1.57); more ranks with a core each, on a larger Intel host, were
// not measured and take the 2-rank limit: docs/performance-log.md,
// "Buffers 16 bytes into a line".
uint64_t IntelPipeMinWithCma(CollKind kind, bool shares_cpus) {
  if (kind == CollKind::kAllreduce) return shares_cpus ? 1 * kMiB : 16 * kMiB;
  if (kind == CollKind::kAllgather) return shares_cpus ? 4 * kMiB : 64 * kMiB;
  if (kind == CollKind::kReduceScatter) return shares_cpus ? 4 * kMiB : 32 * kMiB;
  return UINT64_MAX;
}

// The AMD host: where the slots hand over for the collectives that have a
// pipe (flat against pipe, measured without single copy since cma lost to
// both). `choir perf -n 2|4 --algo shm_flat|shm_pipe|cma`, mean µs per call,
// median of 3-5 launches (docs/algorithms.md, "Switch points per host"):
// allreduce 16 KiB alike, 32 KiB pipe 1.2x; reduce_scatter 64 KiB alike,
// 256 KiB flat 1.08x; allgather (payload = block) alike up to 512 KiB
// blocks, the slots hold 64 KiB. With 4 ranks on 2 cores the slots won at
// 16 KiB (allreduce; allgather 4 KiB blocks), tied for reduce_scatter and
// lost from 64 KiB (16 KiB blocks): the shared-core limits lie between.
// Alltoall (whole buffer): alike at 16 KiB, the pipe 1.2x faster at 64 KiB
// with 2 ranks and 1.3x with 4 on 2 cores, where the slots won at 16 KiB.
// Reduce: alike at 16 KiB, the pipe 1.6x faster at 64 KiB with 2 and 4
// ranks. 0 when this table keeps the Intel limit.
//
// The Zen 4 host keeps these limits but one: with a core per rank the slots
// hold reduce to 64 KiB, where they ran 2.1x faster than the pipe (`choir
// perf -n 2 --op reduce --algo shm_flat|shm_pipe`, 7 interleaved launches
// of 1000 calls, median busbw 12.0 (1.7-13.2) against 5.65 (1.43-7.20)
// GB/s; 32 KiB 6.6 against 7.2; docs/performance-log.md). And with a
// core per rank and cma allowed the slots hold allgather blocks to 16 KiB
// only: larger ones take cma, whose kernel copies the host's slow spells
// do not slow down (without cma the pipe would take them, slower there).
// `choir perf -n 2 --op allgather --algo cma` against the slots, 300
// calls, paired busbw ratios of interleaved launches (2026-12-07):
// with 32 KiB blocks (64 KiB of buffer) 1.05x and 1.04x in fast spells,
// 2.27x where the slots met a slow one (1.4-2.2 GB/s); with 64 KiB
// blocks 1.09x, 1.18x and 3.20x; with 16 KiB blocks the slots kept
// 1.16x and 1.15x in fast spells (cma 1.34x in the slow one).
// docs/performance-log.md, "The slots or cma for allgather blocks of
// 32-64 KiB".
//
// The Zen 5 host (EPYC, family 26 model 2), a core per rank: the slots won
// up to 64 KiB for every collective, as much as they hold (64 KiB of
// payload; an allgather's is a block): `choir perf -n 2 --algo
// shm_flat|shm_pipe`, 7 interleaved launches of 300 calls, median busbw
// GB/s at 64 KiB of buffer, slots against the pipe staging with streaming
// stores (its faster kind there): allreduce 7.55 against 7.17,
// reduce_scatter 8.67 / 6.76, allgather 8.78 / 7.85, alltoall 8.43 / 7.53,
// reduce 10.8 / 10.2, broadcast 24.8 / 12.0 (cma 6.97); at 8-32 KiB the
// slots 1.2x-2.9x faster; allgather at 128 KiB 11.0 against 11.2. With 4
// ranks on 2 cores, and for the collectives not measured there, the Zen 3
// limits.
size_t AmdFlatLimit(SwitchTable table, CollKind kind, bool cma, bool shares_cpus) {
  const bool measured_on_zen5 = kind == CollKind::kAllreduce || kind == CollKind::kReduceScatter ||
                                kind == CollKind::kAllgather || kind == CollKind::kAlltoall ||
                                kind == CollKind::kReduce || kind == CollKind::kBroadcast;
  if (table == SwitchTable::kAmdZen5 && !shares_cpus && measured_on_zen5) return 64 * kKiB;
  if (table == SwitchTable::kAmdZen4 && kind == CollKind::kReduce && !shares_cpus) return 64 * kKiB;
  if (table == SwitchTable::kAmdZen4 && kind == CollKind::kAllgather && cma && !shares_cpus) return 16 * kKiB;
  switch (kind) {
    case CollKind::kAllreduce:
      return (shares_cpus ? 32 : 16) * kKiB;
    case CollKind::kReduceScatter:
      return (shares_cpus ? 16 : 64) * kKiB;
    case CollKind::kAllgather:
      return (shares_cpus ? 8 : 64) * kKiB;
    case CollKind::kAlltoall:
    case CollKind::kReduce:
      return 32 * kKiB;
    default:
      return 0;
  }
}

// The AMD host: where the pipe goes before cma (whole-buffer bytes). For
// broadcast with a core per rank, cma's receiver reads while the root
// writes a share itself, both cores copying at once: 1.3-1.7x faster than
// the pipe at 256 KiB-1 MiB and 1.4x at 4 MiB; from 16 MiB the pipe,
// staging with streaming stores, was 1.06-1.17x faster. With 4 ranks on 2
// cores the pipe was 1.1x faster at 1 MiB and 1.4-2.1x from 4 MiB. `choir
// perf -n 2|4 --algo shm_pipe|cma`, 5-7 launches (docs/algorithms.md).
// Everything else with a pipe: every size (above), but on Zen 4.
//
// The AMD Zen 4 host (EPYC, family 25 model 17): with a core per rank cma
// goes before the pipe below 512 KiB of allgather and 1 MiB of alltoall.
// Allgather, measured again on 2026-12-07 (the pipe then writing its stage
// and its own output in one pass): `choir perf -n 2 --op allgather` as
// chosen (cma) against `--algo shm_pipe`, 9 interleaved launches of 300
// calls in each order, pipe over cma in paired medians: 256 KiB 1.15x and
// 0.88x, 384 KiB 0.84x and 0.80x, 512 KiB 1.28x and 1.24x, 576 KiB 1.30x
// and 1.28x, 864 KiB 1.75x and 1.67x (alltoall at 576 KiB: 0.75x and
// 0.77x, so it keeps 1 MiB; docs/performance-log.md, "The allgather's
// pipe from 512 KiB"). Earlier, allgather was measured again after the
// pipe's walks stopped rewriting the chunk their peers had just read and
// copying their own block out of it
// (shm_pipe.cc, Walk::first_parity): `choir perf -n 2 --op allgather --algo
// shm_pipe|cma`, 7 interleaved launches of 100 calls, median busbw GB/s,
// pipe against cma: 256 KiB 5.57 against 7.03, 512 KiB 6.04 against 6.86,
// 1 MiB 10.1 against 7.14, 2 MiB 10.2 against 7.39, 4 MiB 10.5 against 7.07
// (docs/performance-log.md, "The pipe's own copies"). Before that change:
// `choir perf -n 2 --op allgather|alltoall --algo cma` against the Zen 3
// table, 7 interleaved launches of 100 calls, mean µs per call, median
// (min-max): allgather 256 KiB 21.2 (16.1-25.8) against 31.0 (28.9-100),
// 1 MiB 80.1 (70.7-101) against 101 (92.9-375), 2 MiB 150 against 185,
// 4 MiB 332 against 443 and, in two other passes, 346 against 355 and 395
// against 355, 16 MiB 2889 against 1681; alltoall 64-512 KiB 1.1-1.9x
// faster with cma (64 KiB: 6.2 against 7.8 µs), from 1 MiB the pipe
// 0.8-1.5x, faster in the medians of every size but 2 MiB in one pass
// (docs/algorithms.md). The pipe's launches also spread far more there
// (allgather 256 KiB: 20-170 µs over 7 launches, cma 16-30). With 4 ranks
// on the 2 cores the pipe won at every size, 256 KiB-4 MiB (1.3-2.5x): it
// keeps them. Reduce, past the slots, takes cma below 512 KiB: 7 and 9
// interleaved launches of `--algo cma|shm_pipe`, median busbw, 128 KiB 7.95
// (7.21-8.39) against 5.29 (1.50-5.57) GB/s, 256 KiB 7.96 against 6.50 and
// 8.03 against 6.42, 512 KiB 7.84 against 8.50, 1 MiB 7.98 against 14.7;
// the pipe's slow launches (0.85-1.6 GB/s at 64-128 KiB) are the host's slow
// spells (docs/performance-log.md, "Three speeds of the same host"), which cma's
// kernel copies do not show. Measured with 2 ranks only (a 2-vCPU host):
// larger groups with a core per rank take the same limits unmeasured.
//
// The Zen 5 host keeps the Zen 3 order, the pipe staging with streaming
// stores (StagingStreamsFirst). `choir perf -n 2 --algo shm_pipe|cma`, 20
// calls, median busbw of interleaved launches: allgather 1, 4, 16 MiB, the
// pipe staging with streaming stores, 12.5, 10.9, 10.1 against cma's 9.9,
// 10.7, 7.5 GB/s (two passes of 5 and 7 launches); with the pipe staging
// as the Zen 3 table had it (plain stores, 7 launches) the pipe was still
// 1.3x-1.8x faster for allreduce from 1 MiB (256 KiB: cma 1.07x, but 7.6
// against streaming staging's 10.6 GB/s), 1.15x-2x for reduce from
// 256 KiB, 1.4x-2x for reduce_scatter and 1.05x-1.8x for alltoall.
// Broadcast: cma 1.5x-4.3x faster at 256 KiB-4 MiB, level at 16 MiB
// (25.0 against 24.2), the pipe 1.5x at 64 MiB, as on Zen 3.
uint64_t AmdPipeMin(SwitchTable table, CollKind kind, bool shares_cpus) {
  if (shares_cpus) return 0;
  if (kind == CollKind::kBroadcast) return 16 * kMiB;
  if (table != SwitchTable::kAmdZen4) return 0;
  if (kind == CollKind::kAllgather) return 512 * kKiB;
  if (kind == CollKind::kAlltoall) return 1 * kMiB;
  if (kind == CollKind::kReduce) return 512 * kKiB;
  return 0;
}

}  // namespace

const char* SwitchTableName(SwitchTable table) {
  switch (table) {
    case SwitchTable::kIntel:
      return "intel";
    case SwitchTable::kAmd:
      return "amd";
    case SwitchTable::kAmdZen4:
      return "amd-zen4";
    case SwitchTable::kAmdZen5:
      return "amd-zen5";
  }
  return "intel";
}

std::optional<SwitchTable> ParseSwitchTable(std::string_view name) {
  if (name == "intel") return SwitchTable::kIntel;
  if (name == "amd") return SwitchTable::kAmd;
  if (name == "amd-zen4") return SwitchTable::kAmdZen4;
  if (name == "amd-zen5") return SwitchTable::kAmdZen5;
  return std::nullopt;
}

bool IsZen4(topology::CpuModel cpu) {
  // Family 25 (0x19) is Zen 3 and Zen 4; Zen 4 are models 0x10-0x1f and
  // 0x60-0xaf, the ranges the Linux kernel gives it (EPYC 9004/8004, Ryzen
  // 7000 and 8000, the MI300A's cores). Only model 0x11 was measured.
  const int m = cpu.model;
  return cpu.family == 0x19 && ((m >= 0x10 && m <= 0x1f) || (m >= 0x60 && m <= 0xaf));
}

bool IsZen5(topology::CpuModel cpu) {
  // Family 26 (0x1a) is Zen 5 (EPYC 9005, Ryzen 9000 and AI 300); only
  // model 0x02 was measured.
  return cpu.family == 0x1a;
}

SwitchTable SwitchTableFor(std::string_view setting) {
  if (const auto table = ParseSwitchTable(setting)) return *table;
  if (topology::HostCpuVendor() != topology::CpuVendor::kAmd) return SwitchTable::kIntel;
  const topology::CpuModel cpu = topology::HostCpuModel();
  if (IsZen4(cpu)) return SwitchTable::kAmdZen4;
  return IsZen5(cpu) ? SwitchTable::kAmdZen5 : SwitchTable::kAmd;
}

uint64_t AllreduceLinesMaxBytes(SwitchTable table, bool shares_cpus) {
  return table == SwitchTable::kIntel || shares_cpus ? 512 : AreaOp::kLinesMaxBytes;
}

uint64_t ReduceScatterLinesMaxBlock(SwitchTable table) {
  return (table == SwitchTable::kIntel ? 3 : 5) * AreaOp::kLinePayload;
}

SwitchTable ConfiguredSwitchTable() { return SwitchTableFor(params::GetString(params::Id::kShmTuning)); }

SameHostOrder SameHostOrderFor(SwitchTable table, CollKind kind, bool cma, bool shares_cpus) {
  SameHostOrder order;
  // Without single copy the slots run what they hold and the pipe the rest.
  order.flat_max = cma ? IntelFlatLimitWithCma(kind, shares_cpus) : SIZE_MAX;
  order.pipe_min = cma ? IntelPipeMinWithCma(kind, shares_cpus) : 0;
  if (table != SwitchTable::kIntel) {
    // On the AMD (Zen 3) host the pipe beat cma at every size measured, 16 KiB to
    // 32 MiB, for allreduce, reduce_scatter and allgather, a core per rank
    // or not (1.06x-2.6x, medians of 3-5 launches); flat against pipe was
    // measured without single copy. For alltoall the pipe was 1.1x-1.5x
    // faster from 4 MiB, alike with cma at 256 KiB-1 MiB (within the
    // launches' spread) and faster at 16-64 KiB; for reduce 1.3x-2.6x
    // faster from 64 KiB with 2 ranks, and with 4 1.1x-1.6x but at 256 KiB
    // (cma 1.08x, within the spread). Broadcast, where Zen 4 differs
    // (allgather, alltoall, reduce) and Zen 5 (the slots' limits):
    // AmdFlatLimit and AmdPipeMin.
    const bool has_pipe = FindAlgorithm(kind, "shm_pipe") != nullptr;
    if (const size_t limit = AmdFlatLimit(table, kind, cma, shares_cpus); limit > 0 && (cma || has_pipe)) {
      order.flat_max = limit;
    }
    if (has_pipe) order.pipe_min = AmdPipeMin(table, kind, shares_cpus);
  }
  return order;
}

bool StagingStreamsFirst(SwitchTable table, bool shares_cpus) {
  // The Zen 5 host, 2 ranks: `choir perf -n 2` with CHOIR_SHM_STAGING=plain
  // against =streaming, 7 interleaved launches of 20 calls, median busbw:
  // streaming 1.19x-2.49x faster at 1-256 MiB in all five collectives with
  // a pipe (allreduce 16 MiB 9.48 against 5.64 GB/s, allgather 4 MiB 10.9
  // against 4.85), and at 64-512 KiB (100 calls) 1.0x-1.9x but for
  // reduce_scatter at 64-128 KiB (0.96x-0.98x). 4 ranks on the 2 cores,
  // 5 launches at 256 KiB-16 MiB: 0.80x-1.75x, mostly level; they keep
  // plain stores first. docs/performance-log.md, "The AMD EPYC Zen 5 host".
  // The same host has since run the other way round at times (plain
  // 1.5x-2.2x faster at 4-64 MiB on 2026-12-07, "The Zen 5 host again"):
  // the home kind is where the chooser starts, and it takes the other on
  // a steady lead (walk_choice.h).
  return table == SwitchTable::kAmdZen5 && !shares_cpus;
}

uint64_t PipeStreamingBytes(SwitchTable table, CollKind kind, bool shares_cpus) {
  // The Zen 4 host (32 MiB of L3), 2 ranks: `choir perf -n 2 --op X
  // --iters 40|50` at 4 MiB (2-8 MiB in one pass) with the outputs of a
  // 4 MiB walk written with plain stores against streaming ones,
  // interleaved launches, median of the paired busbw ratios in four passes
  // of 9-25 launches: reduce_scatter 1.20x, 1.18x, 1.06x (0.98x in the
  // first pass), alltoall 1.20x, 1.23x, 1.11x (0.97x), allgather 1.04x,
  // 1.00x, 1.03x; but allreduce 1.00x, 0.96x, 0.92x (1.09x) and reduce
  // 0.96x, 0.97x (1.12x), which keep 4 MiB. From 8 MiB streaming won by
  // 1.1x-2.1x (reduce_scatter, alltoall and allgather at 8 and 16 MiB, a
  // pass of 15 launches), and with 4 ranks on the 2 cores at 4 MiB too
  // (plain stores 0.71x-0.86x). Other hosts were not measured, nor the
  // same-host steps of `hier`, which pass their step's collective
  // (docs/performance-log.md, "The Zen 4 host again").
  const bool plain_to_8m =
      kind == CollKind::kReduceScatter || kind == CollKind::kAllgather || kind == CollKind::kAlltoall;
  if (table == SwitchTable::kAmdZen4 && !shares_cpus && plain_to_8m) return 8 * kMiB;
  return kStreamingBytes;
}

uint64_t CmaPushMaxBytes(SwitchTable table, bool shares_cpus) {
  // `choir perf -n 2 --op allgather --algo cma`, interleaved launches, the
  // reader pulling against the owner pushing, median busbw. Zen 4, a core
  // per rank (7-11 launches per pass): with 1 MiB blocks (2 MiB of buffer)
  // pulling was 1.03x-1.09x faster in all four passes, with 2 MiB blocks
  // 1.08x-1.23x in three; with 128-512 KiB blocks either won by up to 1.24x
  // from one pass to the next. Zen 3 (the amd table), a core per rank (5-12
  // launches per pass): with 512 KiB and 2 MiB blocks pulling was
  // 1.05x-1.23x faster in all four passes, with 1 MiB blocks 1.03x and 1.10x
  // in the two that had them, with 128-256 KiB blocks level (0.95x-1.0x,
  // one pass) (docs/algorithms.md). Zen 5, a core per rank (7 launches per
  // pass, two passes): with 256 KiB blocks pushing 1.17x and 1.13x faster,
  // with 512 KiB-1 MiB blocks level (0.95x-1.05x), with 2 MiB blocks
  // pulling 1.11x and 1.01x; so Zen 3's limit holds there. Elsewhere the
  // owner pushing measured faster (a gather's blocks 1.2x-2.2x from 256
  // KiB on the Intel host: docs/performance-log.md, "Mid-size calls and 4-rank
  // scaling"). Only 2 ranks were measured; ranks that share cores keep
  // pushing.
  if (shares_cpus) return 4 * kMiB;
  if (table == SwitchTable::kAmdZen4) return 1 * kMiB;
  if (table == SwitchTable::kAmd || table == SwitchTable::kAmdZen5) return 512 * kKiB;
  return 4 * kMiB;
}

double CmaReduceCombineCost(SwitchTable table, bool shared) {
  // 0.2 on the first Intel host (2026-11-30), where slices cut by it ran
  // 1.13x-1.39x faster than even ones at 64 KiB-4 MiB, and 1.21x-1.25x with
  // SharedBuffers; the AMD tables keep it (cma runs their reduce on heap
  // buffers only on Zen 4 below 512 KiB; SharedBuffer reduces past the slots
  // take this path on every table). On the Intel host of 2026-12-06 (family
  // 6 model 207) with heap buffers, where the copies between processes are
  // the kernel's, the root's slice weighed 1.71 ran level with even slices,
  // and 1.3 (a cost of 1.2) fastest: `choir perf -n 2 --op reduce --algo
  // cma`, 5 interleaved launches of 50-200 calls, median busbw against 1.71:
  // 256 KiB-1 MiB 1.12x-1.18x, 4 and 16 MiB 1.13x and 1.15x (1.45:
  // 1.11x-1.16x; 1.15: 0.96x-1.22x; even slices 0.98x-1.02x); in two later
  // passes (5 and 7 launches) 1.17x-1.25x at 256 KiB-1 MiB, 0.83x-1.00x at
  // 4-16 MiB. With 4 ranks on the 2 cores a cost of 1.2 (a weight of 1.13
  // against 1.26) measured 1.05x-1.27x at 256 KiB-16 MiB, within the
  // launches' spread. With SharedBuffers there 1.2 against 0.2: 0.86x and
  // 0.89x at 256 KiB, 1.06x-1.14x at 1 MiB, level at 4-16 MiB, so they keep
  // 0.2 (docs/performance-log.md, "The Intel host a third time").
  return table == SwitchTable::kIntel && !shared ? 1.2 : 0.2;
}

const Algorithm* SameHostChoice(const GroupView& g, const OpArgs& a) {
  if (!g.same_host) return nullptr;
  const SameHostOrder order = SameHostOrderFor(g.switch_table, a.kind, g.cma, g.shares_cpus);
  const Algorithm* flat = FindAlgorithm(a.kind, "shm_flat");
  const bool flat_runs = flat != nullptr && FlatUsable(g, a);
  if (flat_runs && FlatSlotBytes(a, g.size) <= order.flat_max) return flat;
  const Algorithm* pipe = FindAlgorithm(a.kind, "shm_pipe");
  const bool pipe_runs = pipe != nullptr && PipeUsable(g, a);
  if (pipe_runs && (!g.cma || a.SelectionBytes(g.size) >= order.pipe_min)) return pipe;
  const Algorithm* cma = FindAlgorithm(a.kind, "cma");
  if (cma != nullptr && CmaUsable(g, a)) return cma;
  return flat_runs ? flat : nullptr;  // a limit below the slots' size, with no pipe and no cma
}

}  // namespace choir::algorithms
