#include <cstring>

#include "algorithms/algorithms.h"

namespace choir::algorithms {

const std::vector<Algorithm>& AllAlgorithms() {
  static const std::vector<Algorithm> all = {
      {"ring", CollKind::kAllreduce, AllreduceRing, "2(n-1) steps, 2(n-1)/n*N bytes"},
      {"recursive_doubling", CollKind::kAllreduce, AllreduceRecursiveDoubling,
       "log2(n) (+2) steps, N*log2(n) bytes"},
      {"ring", CollKind::kReduceScatter, ReduceScatterRing, "n-1 steps, (n-1)/n*N bytes"},
      {"ring", CollKind::kAllgather, AllgatherRing, "n-1 steps, (n-1)/n*N bytes"},
      {"ring", CollKind::kAllgatherV, AllgatherRing, "n-1 steps, N - own block bytes"},
      {"binomial", CollKind::kBroadcast, BroadcastBinomial, "ceil(log2 n) steps, up to log2(n)*N bytes"},
      {"binomial", CollKind::kReduce, ReduceBinomial, "ceil(log2 n) steps, N bytes"},
      {"linear", CollKind::kGather, GatherLinear, "1 step, root receives (n-1)/n*N bytes"},
      {"linear", CollKind::kScatter, ScatterLinear, "1 step, root sends (n-1)/n*N bytes"},
      {"pairwise", CollKind::kAlltoall, AlltoallPairwise, "n-1 steps, (n-1)/n*N bytes"},
      {"pairwise", CollKind::kAlltoallV, AlltoallPairwise, "n-1 steps, sum of splits"},
      {"dissemination", CollKind::kBarrier, BarrierDissemination, "ceil(log2 n) steps, 0 bytes"},
  };
  return all;
}

const Algorithm* FindAlgorithm(CollKind kind, std::string_view name) {
  for (const Algorithm& a : AllAlgorithms()) {
    if (a.kind == kind && name == a.name) return &a;
  }
  return nullptr;
}

void CopyIfDistinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) kernels::CopyBytes(dst, src, bytes, bytes >= (8u << 20));
}

void FinishAverage(const Context& c, void* data, size_t count) {
  if (c.op() == ReduceOp::kAvg && count > 0) kernels::DivideByCount(data, count, c.dtype(), c.size());
}

}  // namespace choir::algorithms
