// Every collective algorithm choir has, one function per file, and the table
// that names them. Selection (select.h) picks one per operation.
//
// All algorithms have the same shape: they read OpArgs (buffers, counts,
// root) and move data through the Context; they never touch sockets or rings
// directly. Each file's first line states its cost in steps (latency terms)
// and bytes sent per rank, with n ranks and N bytes.
//
// Thread-safety: stateless functions.
#ifndef CHOIR_ALGORITHMS_ALGORITHMS_H_
#define CHOIR_ALGORITHMS_ALGORITHMS_H_

#include <string_view>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/group_view.h"
#include "algorithms/op.h"
#include "choir/status.h"

namespace choir::algorithms {

using AlgoFn = Status (*)(Context& ctx, const OpArgs& args);
// Whether an algorithm can run this operation on this group at all.
using UsableFn = bool (*)(const GroupView& group, const OpArgs& args);
// Predicted seconds on this group (cost.cc); used to choose among algorithms
// of a group that spans hosts.
using CostFn = double (*)(const GroupView& group, const OpArgs& args);

struct Algorithm {
  const char* name;   // unique per collective, shown by `choir perf` and in logs
  CollKind kind;
  AlgoFn fn;
  const char* cost;   // the cost line, for `choir topo` and docs
  UsableFn usable = nullptr;  // null: works on any group
  // Why the algorithm is not usable (for a forced choice that cannot be honoured).
  const char* needs = "";
  CostFn predict = nullptr;  // null: not compared by cost
};

// Every algorithm, grouped by collective.
const std::vector<Algorithm>& AllAlgorithms();
// The algorithms of one collective, in registry order (no scan per call).
const std::vector<const Algorithm*>& AlgorithmsFor(CollKind kind);
const Algorithm* FindAlgorithm(CollKind kind, std::string_view name);
// True for "hier", the algorithm that runs others per level.
bool IsHierarchical(const Algorithm& a);

Status AllreduceRing(Context& c, const OpArgs& a);
Status AllreduceRecursiveDoubling(Context& c, const OpArgs& a);
Status ReduceScatterRing(Context& c, const OpArgs& a);
Status AllgatherRing(Context& c, const OpArgs& a);  // also AllgatherV
Status BroadcastBinomial(Context& c, const OpArgs& a);
Status ReduceBinomial(Context& c, const OpArgs& a);
Status GatherLinear(Context& c, const OpArgs& a);
Status ScatterLinear(Context& c, const OpArgs& a);
Status AlltoallPairwise(Context& c, const OpArgs& a);  // also AlltoallV
Status BarrierDissemination(Context& c, const OpArgs& a);

// Same-host: shm_flat.cc (small payloads in shared slots) and cma.cc (single copy).
Status AllreduceFlat(Context& c, const OpArgs& a);
Status ReduceFlat(Context& c, const OpArgs& a);
Status ReduceScatterFlat(Context& c, const OpArgs& a);
Status BroadcastFlat(Context& c, const OpArgs& a);
Status AllgatherFlat(Context& c, const OpArgs& a);
Status GatherFlat(Context& c, const OpArgs& a);
Status ScatterFlat(Context& c, const OpArgs& a);
Status AlltoallFlat(Context& c, const OpArgs& a);
Status BarrierFlat(Context& c, const OpArgs& a);
bool FlatUsable(const GroupView& g, const OpArgs& a);
size_t FlatSlotBytes(const OpArgs& a, int n);

Status AllreduceCma(Context& c, const OpArgs& a);
Status ReduceScatterCma(Context& c, const OpArgs& a);
Status AllgatherCma(Context& c, const OpArgs& a);
Status BroadcastCma(Context& c, const OpArgs& a);
Status ReduceCma(Context& c, const OpArgs& a);
Status GatherCma(Context& c, const OpArgs& a);
Status ScatterCma(Context& c, const OpArgs& a);
Status AlltoallCma(Context& c, const OpArgs& a);
bool CmaUsable(const GroupView& g, const OpArgs& a);

Status AllreducePipe(Context& c, const OpArgs& a);
Status ReduceScatterPipe(Context& c, const OpArgs& a);
Status AllgatherPipe(Context& c, const OpArgs& a);
Status AlltoallPipe(Context& c, const OpArgs& a);
Status BroadcastPipe(Context& c, const OpArgs& a);
Status ReducePipe(Context& c, const OpArgs& a);
bool PipeUsable(const GroupView& g, const OpArgs& a);

// Across hosts: hier.cc, with the cost model of cost.cc.
Status AllreduceHier(Context& c, const OpArgs& a);
Status ReduceScatterHier(Context& c, const OpArgs& a);
Status AllgatherHier(Context& c, const OpArgs& a);
Status BroadcastHier(Context& c, const OpArgs& a);
bool HierUsable(const GroupView& g, const OpArgs& a);
double PredictRingAllreduce(const GroupView& g, const OpArgs& a);
double PredictRingCollective(const GroupView& g, const OpArgs& a);
double PredictRecursiveDoubling(const GroupView& g, const OpArgs& a);
double PredictBinomial(const GroupView& g, const OpArgs& a);
double PredictHierAllreduce(const GroupView& g, const OpArgs& a);
double PredictHierGather(const GroupView& g, const OpArgs& a);
double PredictHierBroadcast(const GroupView& g, const OpArgs& a);

// Shared helpers.
// dst <- src when they differ (no-op for in-place calls).
void CopyIfDistinct(void* dst, const void* src, size_t bytes);
// CopyIfDistinct uses streaming stores from this many bytes.
inline constexpr size_t kCopyStreamingBytes = 8u << 20;
// Divides `count` elements by the group size when the reduce op is avg.
void FinishAverage(const Context& c, void* data, size_t count);
// How a walk that finishes avg (`average`) divides: an average of float32
// or float64 is divided by the reduce kernel before its stores
// (AverageDivisor: the divisor to pass kernels::ReduceMany; 1 for every
// other walk), the other types' by FinishAverage after the sum, a pass
// that rewrites the result and keeps a walk from storing it to two places
// in one pass, streaming it or combining into the output (DividesApart).
// On the Zen 4 host, 2 ranks, float32, the kernel's division against the
// pass apart: allreduce 1.07x-1.18x the busbw in SharedBuffers (paired)
// and 0.96x-1.26x on the heap (medians) at 64 KiB-64 MiB, reduce_scatter
// up to 1.71x on the heap and 2.06x in SharedBuffers
// (docs/performance-log.md, "Averages divided before the stores").
int AverageDivisor(const Context& c, bool average);
bool DividesApart(const Context& c, bool average);

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_ALGORITHMS_H_
