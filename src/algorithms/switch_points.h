// Where the same-host algorithms hand over to one another: the shared slots
// (shm_flat), the shared pipe (shm_pipe), single copy (cma) and, past them,
// the generic algorithms over the shared-memory rings.
//
// The points are measured, not derived, and they differ between hosts by
// more than one rule covers: on the Intel host (Emerald Rapids) cma won
// from 16-32 KiB payloads and held allgather to 64 MiB; on the AMD host
// (EPYC, Zen 3) copies through the caches beat cma at every size measured
// for allreduce, reduce_scatter and allgather, and on the AMD Zen 4 host
// (EPYC) cma won back mid-size allgathers and alltoalls; on the AMD Zen 5
// host (EPYC) the slots won up to what they hold and the pipe staged
// faster with streaming stores (docs/algorithms.md, "Switch points per
// host"). Each host class has its table; CHOIR_SHM_TUNING picks one (auto:
// by the CPU's maker and, for AMD, its family and model: the Zen 4 table
// on Zen 4, the Zen 5 one on Zen 5, the Zen 3 one on every other AMD CPU;
// the Intel table for anything not AMD).
// Every rank of a host must use the same table: connect checks it.
//
// The algorithms' `usable` functions say only whether an algorithm can run
// (a payload that fits the slots, a pipe that carries the blocks); what is
// preferred among those that can lives here.
//
// Thread-safety: pure functions.
#ifndef CHOIR_ALGORITHMS_SWITCH_POINTS_H_
#define CHOIR_ALGORITHMS_SWITCH_POINTS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "algorithms/op.h"

namespace choir::topology {
struct CpuModel;  // topology/machine.h
}  // namespace choir::topology

namespace choir::algorithms {

struct Algorithm;
struct GroupView;

enum class SwitchTable : uint8_t { kIntel, kAmd, kAmdZen4, kAmdZen5 };

const char* SwitchTableName(SwitchTable table);
// "intel", "amd", "amd-zen4" or "amd-zen5"; nullopt for anything else.
std::optional<SwitchTable> ParseSwitchTable(std::string_view name);
// CHOIR_SHM_TUNING's value: "auto" picks by this CPU's maker and model.
SwitchTable SwitchTableFor(std::string_view setting);
// The table CHOIR_SHM_TUNING names for this process.
SwitchTable ConfiguredSwitchTable();
// Whether `cpu` (topology::HostCpuModel) is an AMD Zen 4 (family 25).
bool IsZen4(topology::CpuModel cpu);
// Whether `cpu` is an AMD Zen 5 (family 26).
bool IsZen5(topology::CpuModel cpu);

// What a table prefers for one collective on one group.
struct SameHostOrder {
  size_t flat_max = 0;             // largest slot payload sent through the slots
  uint64_t pipe_min = UINT64_MAX;  // whole-buffer bytes from which the pipe goes before cma
};
// `cma`: single copy allowed on the group; `shares_cpus`: its ranks share cores.
SameHostOrder SameHostOrderFor(SwitchTable table, CollKind kind, bool cma, bool shares_cpus);

// Whether the pipe's staging (walk_choice.h, StagingChooser) starts with,
// and leans to, streaming stores rather than plain ones: on the Zen 5 table
// with a core per rank.
bool StagingStreamsFirst(SwitchTable table, bool shares_cpus);

// The whole-buffer bytes from which the pipe's walks of `kind` write their
// outputs with streaming stores: kStreamingBytes (4 MiB), but 8 MiB for
// reduce_scatter, allgather and alltoall on the Zen 4 table with a core per
// rank. A same-host step of `hier` passes its step's collective. Every
// rank of a host has the same table and the same `shares_cpus`, so their
// walks agree.
uint64_t PipeStreamingBytes(SwitchTable table, CollKind kind, bool shares_cpus);

// cma's allgather of heap buffers: a block below this many bytes is written
// into the peers by its owner (process_vm_writev from its cache); from this
// size on each peer reads it (process_vm_readv into its output). Every rank
// of a host has the same table and computes the same `shares_cpus` from
// the same published affinities, so they agree.
uint64_t CmaPushMaxBytes(SwitchTable table, bool shares_cpus);

// The largest allreduce payload that travels in flagged lines rather than
// through the slot's payload (shm_flat.cc; AreaOp::LinesFit caps it at
// AreaOp::kLinesMaxBytes, 1 KiB): 1 KiB on the AMD tables, measured
// on Zen 5 (lines 0.75x of the slots' time at 1 KiB); 512 bytes on the
// Intel table, where at 1 KiB the slots, in the ring of medium slots, were
// level with the lines or ahead in every pass (2 ranks: 0.83x-0.99x of the
// lines' time; 4 ranks on 2 cores: 1.17x-1.51x their busbw) while the lines
// stayed ahead at 512 bytes with a core per rank (the slots 1.11x of their
// time; docs/performance-log.md, "A fair timed loop in `choir perf`").
// 512 bytes on every table when the ranks share cores (`shares_cpus`): on
// the Zen 4 host, 4 ranks on its 2 cores, 11 interleaved launches of 1000
// calls in each order, the slots had 1.11x and 1.12x the lines' busbw at
// 1 KiB (paired medians), and 1.01x-1.19x and 1.01x-1.08x at 16-512 bytes
// (docs/performance-log.md, "The Zen 4 host again"); the Intel host's
// 1.17x-1.51x at 1 KiB above. The Zen 3 and Zen 5 tables take that bound
// unmeasured. Every rank of a host has the same table and the same
// `shares_cpus`, so they take the same path.
uint64_t AllreduceLinesMaxBytes(SwitchTable table, bool shares_cpus);
// The same for a reduce_scatter's blocks (AreaOp::BlockLinesFit caps them
// at 5 lines, 280 bytes): on the AMD tables as far as that, measured on Zen
// 5; on the Intel table up to 3 lines (168 bytes), since with 2 ranks
// blocks of 256 bytes took 0.82x-0.87x of the lines' time through the
// slots in two passes of 7 launches, while blocks of 64 and 128 bytes were
// level (0.96x-1.02x); with 4 ranks on 2 cores (one pass of 3 launches)
// the slots had 1.15x-1.24x the busbw at blocks of 64-256 bytes, too noisy
// a pass to move the smaller blocks as well. Blocks of 4 lines were not
// measured and take the slots (docs/performance-log.md, "A fair timed loop
// in `choir perf`").
uint64_t ReduceScatterLinesMaxBlock(SwitchTable table);

// What combining a byte of an input costs in cma's reduce, as a share of
// copying a byte between processes: it sets how much larger the root's slice
// is than the others' (cma.cc, ReduceSlices). `shared`: every copy goes
// through SharedBuffers' mappings (AreaOp::ReduceShared), none through the
// kernel. Every rank of a host has the same table and sees the same
// buffers published, so they cut the same slices.
double CmaReduceCombineCost(SwitchTable table, bool shared);

// The same-host algorithm for `a` on `g`, or nullptr when the group is not
// one host's ranks or none of them can run it: the slots up to the table's
// limit, then the pipe or cma in the table's order, and the slots as far as
// they hold when neither of those can run. The same on every rank: it
// depends only on what every rank of `g` agreed on.
const Algorithm* SameHostChoice(const GroupView& g, const OpArgs& a);

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_SWITCH_POINTS_H_
