#include <array>
#include <cstring>

#include "algorithms/algorithms.h"

namespace choir::algorithms {

const std::vector<Algorithm>& AllAlgorithms() {
  constexpr const char* kFlatCost = "1 step, payload <= CHOIR_SHM_SLOT_BYTES read from peers' shared slots";
  constexpr const char* kCmaCost = "1 step, each byte copied once between processes (process_vm_readv)";
  constexpr const char* kFlatNeeds = "every rank on one host, sharing memory, and a payload that fits CHOIR_SHM_SLOT_BYTES";
  constexpr const char* kCmaNeeds = "every rank on one host, sharing memory, with process_vm_readv allowed (CHOIR_SHM_CMA=auto)";
  constexpr const char* kPipeCost = "1 step, input read once and output written once, chunks exchanged through the caches";
  constexpr const char* kPipeNeeds = "every rank on one host, sharing memory, and CHOIR_SHM_PIPE_BYTES > 0";
  constexpr const char* kHierCost = "intra-host steps in shared memory + 2(H-1)/H*N bytes per host between hosts, all local ranks in parallel";
  constexpr const char* kHierNeeds = "ranks on several hosts with at least one host holding two or more (equal hosts for reduce_scatter and allgather)";
  // Within a collective: same-host algorithms first (which of them is
  // preferred for a size: switch_points.cc), then the generic ones in order
  // of preference.
  static const std::vector<Algorithm> all = {
      {"shm_flat", CollKind::kAllreduce, AllreduceFlat, kFlatCost, FlatUsable, kFlatNeeds},
      {"shm_pipe", CollKind::kAllreduce, AllreducePipe, kPipeCost, PipeUsable, kPipeNeeds},
      {"cma", CollKind::kAllreduce, AllreduceCma, kCmaCost, CmaUsable, kCmaNeeds},
      {"hier", CollKind::kAllreduce, AllreduceHier, kHierCost, HierUsable, kHierNeeds, PredictHierAllreduce},
      {"recursive_doubling", CollKind::kAllreduce, AllreduceRecursiveDoubling, "log2(n) (+2) steps, N*log2(n) bytes",
       nullptr, "", PredictRecursiveDoubling},
      {"ring", CollKind::kAllreduce, AllreduceRing, "2(n-1) steps, 2(n-1)/n*N bytes", nullptr, "", PredictRingAllreduce},
      {"shm_flat", CollKind::kReduceScatter, ReduceScatterFlat, kFlatCost, FlatUsable, kFlatNeeds},
      {"cma", CollKind::kReduceScatter, ReduceScatterCma, kCmaCost, CmaUsable, kCmaNeeds},
      // Measured no faster than cma for reduce_scatter (docs/performance-log.md): used when cma
      // is not allowed.
      {"shm_pipe", CollKind::kReduceScatter, ReduceScatterPipe, kPipeCost, PipeUsable, kPipeNeeds},
      {"hier", CollKind::kReduceScatter, ReduceScatterHier, kHierCost, HierUsable, kHierNeeds, PredictHierGather},
      {"ring", CollKind::kReduceScatter, ReduceScatterRing, "n-1 steps, (n-1)/n*N bytes", nullptr, "", PredictRingCollective},
      {"shm_flat", CollKind::kAllgather, AllgatherFlat, kFlatCost, FlatUsable, kFlatNeeds},
      {"shm_pipe", CollKind::kAllgather, AllgatherPipe, kPipeCost, PipeUsable, kPipeNeeds},
      {"cma", CollKind::kAllgather, AllgatherCma, kCmaCost, CmaUsable, kCmaNeeds},
      {"hier", CollKind::kAllgather, AllgatherHier, kHierCost, HierUsable, kHierNeeds, PredictHierGather},
      {"ring", CollKind::kAllgather, AllgatherRing, "n-1 steps, (n-1)/n*N bytes", nullptr, "", PredictRingCollective},
      {"shm_flat", CollKind::kAllgatherV, AllgatherFlat, kFlatCost, FlatUsable, kFlatNeeds},
      {"cma", CollKind::kAllgatherV, AllgatherCma, kCmaCost, CmaUsable, kCmaNeeds},
      {"ring", CollKind::kAllgatherV, AllgatherRing, "n-1 steps, N - own block bytes"},
      {"shm_flat", CollKind::kBroadcast, BroadcastFlat, kFlatCost, FlatUsable, kFlatNeeds},
      {"shm_pipe", CollKind::kBroadcast, BroadcastPipe, kPipeCost, PipeUsable, kPipeNeeds},
      {"cma", CollKind::kBroadcast, BroadcastCma, kCmaCost, CmaUsable, kCmaNeeds},
      {"hier", CollKind::kBroadcast, BroadcastHier, kHierCost, HierUsable, kHierNeeds, PredictHierBroadcast},
      {"binomial", CollKind::kBroadcast, BroadcastBinomial, "ceil(log2 n) steps, up to log2(n)*N bytes", nullptr, "",
       PredictBinomial},
      {"shm_flat", CollKind::kReduce, ReduceFlat, kFlatCost, FlatUsable, kFlatNeeds},
      {"shm_pipe", CollKind::kReduce, ReducePipe, kPipeCost, PipeUsable, kPipeNeeds},
      {"cma", CollKind::kReduce, ReduceCma, kCmaCost, CmaUsable, kCmaNeeds},
      {"binomial", CollKind::kReduce, ReduceBinomial, "ceil(log2 n) steps, N bytes"},
      {"shm_flat", CollKind::kGather, GatherFlat, kFlatCost, FlatUsable, kFlatNeeds},
      {"cma", CollKind::kGather, GatherCma, kCmaCost, CmaUsable, kCmaNeeds},
      {"linear", CollKind::kGather, GatherLinear, "1 step, root receives (n-1)/n*N bytes"},
      {"shm_flat", CollKind::kScatter, ScatterFlat, kFlatCost, FlatUsable, kFlatNeeds},
      {"cma", CollKind::kScatter, ScatterCma, kCmaCost, CmaUsable, kCmaNeeds},
      {"linear", CollKind::kScatter, ScatterLinear, "1 step, root sends (n-1)/n*N bytes"},
      {"shm_flat", CollKind::kAlltoall, AlltoallFlat, kFlatCost, FlatUsable, kFlatNeeds},
      {"shm_pipe", CollKind::kAlltoall, AlltoallPipe, kPipeCost, PipeUsable, kPipeNeeds},
      {"cma", CollKind::kAlltoall, AlltoallCma, kCmaCost, CmaUsable, kCmaNeeds},
      {"pairwise", CollKind::kAlltoall, AlltoallPairwise, "n-1 steps, (n-1)/n*N bytes"},
      {"cma", CollKind::kAlltoallV, AlltoallCma, kCmaCost, CmaUsable, kCmaNeeds},
      {"pairwise", CollKind::kAlltoallV, AlltoallPairwise, "n-1 steps, sum of splits"},
      {"shm_flat", CollKind::kBarrier, BarrierFlat, "1 step, one cache line per peer", FlatUsable, kFlatNeeds},
      {"dissemination", CollKind::kBarrier, BarrierDissemination, "ceil(log2 n) steps, 0 bytes"},
  };
  return all;
}

const std::vector<const Algorithm*>& AlgorithmsFor(CollKind kind) {
  static const auto* by_kind = [] {
    auto* table = new std::array<std::vector<const Algorithm*>, kNumCollKinds>();
    for (const Algorithm& a : AllAlgorithms()) (*table)[static_cast<size_t>(a.kind)].push_back(&a);
    return table;
  }();
  return (*by_kind)[static_cast<size_t>(kind)];
}

const Algorithm* FindAlgorithm(CollKind kind, std::string_view name) {
  for (const Algorithm* a : AlgorithmsFor(kind)) {
    if (name == a->name) return a;
  }
  return nullptr;
}

bool IsHierarchical(const Algorithm& a) { return std::strcmp(a.name, "hier") == 0; }

void CopyIfDistinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) kernels::CopyBytes(dst, src, bytes, bytes >= kCopyStreamingBytes);
}

void FinishAverage(const Context& c, void* data, size_t count) {
  if (c.op() == ReduceOp::kAvg && count > 0) kernels::DivideByCount(data, count, c.dtype(), c.size());
}

int AverageDivisor(const Context& c, bool average) {
  return average && c.op() == ReduceOp::kAvg && kernels::AverageFuses(c.dtype()) ? c.size() : 1;
}

bool DividesApart(const Context& c, bool average) {
  return average && c.op() == ReduceOp::kAvg && !kernels::AverageFuses(c.dtype()) && c.size() > 1;
}

}  // namespace choir::algorithms
