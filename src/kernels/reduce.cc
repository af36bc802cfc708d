// Run-time dispatch for the kernels: detects the CPU once, builds one complete
// table per usable ISA (SIMD entries, portable ones where a SIMD file has
// none), and routes the public functions through the active table.
//
// Thread-safety: the tables are built once under the magic-static guard and
// never change; the active-table pointer is atomic.
#include "kernels/reduce.h"

#include <atomic>
#include <cstring>
#include <string_view>

#include "base/logging.h"
#include "kernels/isa.h"

#if CHOIR_KERNELS_X86
#include <cpuid.h>
#endif

namespace choir::kernels {
namespace {

bool CpuHasAvx2() {
#if CHOIR_KERNELS_X86
  // The compiler runtime's checks also confirm that the OS saves the wider
  // registers (XGETBV). F16C is read from CPUID directly because not every
  // compiler's __builtin_cpu_supports knows it; it is a VEX instruction set,
  // so the AVX check above covers its OS support.
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && f16c;
#else
  return false;
#endif
}

bool CpuHasAvx512() {
#if CHOIR_KERNELS_X86
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

// `simd` with its empty slots filled from the portable table.
IsaTable Complete(const IsaTable& simd) {
  const IsaTable& generic = GenericTable();
  IsaTable table = simd;
  for (int d = 0; d < kNumDataTypes; ++d) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      if (table.reduce[d][o] == nullptr) table.reduce[d][o] = generic.reduce[d][o];
      if (table.many[d][o] == nullptr) table.many[d][o] = generic.many[d][o];
    }
    if (table.many_avg[d] == nullptr) table.many_avg[d] = generic.many_avg[d];
    if (table.divide[d] == nullptr) table.divide[d] = generic.divide[d];
  }
  if (table.copy_nontemporal == nullptr) table.copy_nontemporal = generic.copy_nontemporal;
  if (table.copy == nullptr) table.copy = generic.copy;
  return table;
}

// The usable tables, best first; the last one is always the portable one.
struct Registry {
  IsaTable tables[3];
  int count = 0;
};

const Registry& GetRegistry() {
  static const Registry registry = [] {
    Registry r;
    if (const IsaTable* t = Avx512Table(); t != nullptr && CpuHasAvx512()) {
      r.tables[r.count++] = Complete(*t);
    }
    if (const IsaTable* t = Avx2Table(); t != nullptr && CpuHasAvx2()) {
      r.tables[r.count++] = Complete(*t);
    }
    r.tables[r.count++] = GenericTable();
    return r;
  }();
  return registry;
}

std::atomic<const IsaTable*>& ActiveSlot() {
  static std::atomic<const IsaTable*> slot{&GetRegistry().tables[0]};
  return slot;
}

const IsaTable& Active() { return *ActiveSlot().load(std::memory_order_acquire); }

bool InRange(DataType dtype, ReduceOp op) {
  return static_cast<int>(dtype) < kNumDataTypes && static_cast<int>(op) < kNumReduceOps;
}

}  // namespace

ReduceFn GetReduceFn(DataType dtype, ReduceOp op) {
  if (!InRange(dtype, op)) return nullptr;
  if (op == ReduceOp::kAvg) op = ReduceOp::kSum;
  return Active().reduce[static_cast<int>(dtype)][static_cast<int>(op)];
}

bool AverageFuses(DataType dtype) { return dtype == DataType::kFloat32 || dtype == DataType::kFloat64; }

void ReduceMany(void* dst, const void* const* srcs, int k, size_t count, DataType dtype,
                ReduceOp op, bool nontemporal, int divisor) {
  CHOIR_CHECK(k >= 1);
  CHOIR_CHECK(InRange(dtype, op));
  if (divisor != 1) {
    CHOIR_CHECK(divisor > 1 && op == ReduceOp::kAvg && AverageFuses(dtype));
    if (count == 0) return;
    if (k == 1) {
      if (dst != srcs[0]) CopyBytes(dst, srcs[0], count * DataTypeSize(dtype), nontemporal);
      DivideByCount(dst, count, dtype, divisor);
      return;
    }
    Active().many_avg[static_cast<int>(dtype)](dst, srcs, k, count, nontemporal, divisor);
    return;
  }
  if (op == ReduceOp::kAvg) op = ReduceOp::kSum;
  const ManyFn fn = Active().many[static_cast<int>(dtype)][static_cast<int>(op)];
  CHOIR_CHECK(fn != nullptr);  // bitwise op on a float type: CheckReduceSupported first
  if (count == 0) return;
  if (k == 1) {
    // A single input is a copy (bit-exact, even for signalling NaNs).
    if (dst != srcs[0]) CopyBytes(dst, srcs[0], count * DataTypeSize(dtype), nontemporal);
    return;
  }
  if (k == 2 && !nontemporal) {
    // The two-input loop has its input count fixed at compile time: for a
    // tiny payload that is most of the call (the 2-rank small-message path).
    Active().reduce[static_cast<int>(dtype)][static_cast<int>(op)](dst, srcs[0], srcs[1], count);
    return;
  }
  fn(dst, srcs, k, count, nontemporal);
}

void DivideByCount(void* data, size_t count, DataType dtype, int n) {
  CHOIR_CHECK(n >= 1);
  CHOIR_CHECK(static_cast<int>(dtype) < kNumDataTypes);
  if (n == 1 || count == 0) return;
  Active().divide[static_cast<int>(dtype)](data, count, n);
}

void CopyBytes(void* dst, const void* src, size_t bytes, bool nontemporal) {
  if (bytes == 0) return;
  if (nontemporal && bytes >= kMinNontemporalBytes) {
    Active().copy_nontemporal(dst, src, bytes);
  } else if (CopyAvoidsMemcpy(dst, src, bytes, bytes >= kMisalignedCopyMinBytes && MisalignedCopyRuleActive())) {
    Active().copy(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

namespace {
// How a one-pass loop stores to two destinations of `bytes` each. Its
// vector stores start on a vector boundary in its first destination: that
// must be the streaming one (`swap`: b comes first), and a second
// streaming one must share its offset within a line; otherwise (or under
// kMinCopyTwiceBytes) no one pass (`fuses` false).
struct TwoStores {
  bool fuses;
  bool swap;
  bool first_streams;
  bool second_streams;
};

TwoStores PlanTwoStores(const void* a, bool a_nontemporal, const void* b, bool b_nontemporal, size_t bytes) {
  const bool stream_a = a_nontemporal && bytes >= kMinNontemporalBytes;
  const bool stream_b = b_nontemporal && bytes >= kMinNontemporalBytes;
  const bool fuses = bytes >= kMinCopyTwiceBytes && !(stream_a && stream_b && CopyMisaligned(a, b));
  // After the swap the first destination streams if either does, the
  // second only if both do.
  return {fuses, stream_b && !stream_a, stream_a || stream_b, stream_a && stream_b};
}

// The one-pass copy for these destinations, or null where CopyBytesTwice
// makes two copies (the portable kernels have none).
CopyTwiceFn CopyTwiceLoopFor(const TwoStores& plan) {
  return plan.fuses ? Active().copy_twice[plan.first_streams ? 1 : 0][plan.second_streams ? 1 : 0] : nullptr;
}

// The one-pass reduction for (dtype, op) with these destinations, or null
// where ReduceManyTwice reduces and copies.
ManyTwiceFn ManyTwiceLoopFor(const TwoStores& plan, DataType dtype, ReduceOp op) {
  if (!plan.fuses || !InRange(dtype, op)) return nullptr;
  if (op == ReduceOp::kAvg) op = ReduceOp::kSum;
  return Active().many_twice[static_cast<int>(dtype)][static_cast<int>(op)];
}

// The one-pass average for `dtype` with these destinations, or null where
// ReduceManyTwice averages into one and copies.
ManyTwiceAvgFn ManyTwiceAverageLoopFor(const TwoStores& plan, DataType dtype) {
  if (!plan.fuses || static_cast<int>(dtype) >= kNumDataTypes) return nullptr;
  return Active().many_twice_avg[static_cast<int>(dtype)];
}
}  // namespace

void CopyBytesTwice(void* a, bool a_nontemporal, void* b, bool b_nontemporal, const void* src, size_t bytes) {
  const TwoStores plan = PlanTwoStores(a, a_nontemporal, b, b_nontemporal, bytes);
  const CopyTwiceFn fn = CopyTwiceLoopFor(plan);
  if (fn == nullptr) {
    CopyBytes(a, src, bytes, a_nontemporal);
    CopyBytes(b, src, bytes, b_nontemporal);
  } else if (plan.swap) {
    fn(b, a, src, bytes);
  } else {
    fn(a, b, src, bytes);
  }
}

bool CopyBytesTwiceFuses(const void* a, bool a_nontemporal, const void* b, bool b_nontemporal, size_t bytes) {
  return CopyTwiceLoopFor(PlanTwoStores(a, a_nontemporal, b, b_nontemporal, bytes)) != nullptr;
}

void ReduceManyTwice(void* a, bool a_nontemporal, void* b, bool b_nontemporal, const void* const* srcs, int k,
                     size_t count, DataType dtype, ReduceOp op, int divisor) {
  CHOIR_CHECK(k >= 1);
  CHOIR_CHECK(InRange(dtype, op));
  CHOIR_CHECK(divisor == 1 || (divisor > 1 && op == ReduceOp::kAvg && AverageFuses(dtype)));
  // As ReduceMany: a bitwise op on a float type fails here, whatever k.
  CHOIR_CHECK(Active().many[static_cast<int>(dtype)][static_cast<int>(op == ReduceOp::kAvg ? ReduceOp::kSum : op)] !=
              nullptr);
  const size_t bytes = count * DataTypeSize(dtype);
  if (k == 1 && divisor == 1) {
    // A copy; a destination that is the source already holds it.
    if (a == srcs[0]) {
      if (b != srcs[0]) CopyBytes(b, srcs[0], bytes, b_nontemporal);
    } else if (b == srcs[0]) {
      CopyBytes(a, srcs[0], bytes, a_nontemporal);
    } else {
      CopyBytesTwice(a, a_nontemporal, b, b_nontemporal, srcs[0], bytes);
    }
    return;
  }
  const TwoStores plan = PlanTwoStores(a, a_nontemporal, b, b_nontemporal, bytes);
  const ManyTwiceFn fn = divisor == 1 ? ManyTwiceLoopFor(plan, dtype, op) : nullptr;
  const ManyTwiceAvgFn average = divisor > 1 && k > 1 ? ManyTwiceAverageLoopFor(plan, dtype) : nullptr;
  if (fn == nullptr && average == nullptr) {
    // Combined into the destination that keeps its lines in the cache,
    // then copied from there (not read back from memory).
    // Streaming only from kMinNontemporalBytes, as in the one pass.
    const bool stream_a = a_nontemporal && bytes >= kMinNontemporalBytes;
    const bool stream_b = b_nontemporal && bytes >= kMinNontemporalBytes;
    const bool b_first = stream_a && !stream_b;
    void* first = b_first ? b : a;
    void* second = b_first ? a : b;
    ReduceMany(first, srcs, k, count, dtype, op, b_first ? stream_b : stream_a, divisor);
    CopyBytes(second, first, bytes, b_first ? stream_a : stream_b);
    return;
  }
  const int streams = plan.second_streams ? 2 : plan.first_streams ? 1 : 0;
  void* x = plan.swap ? b : a;
  void* y = plan.swap ? a : b;
  if (fn != nullptr) {
    fn(x, y, srcs, k, count, streams);
  } else {
    average(x, y, srcs, k, count, streams, divisor);
  }
}

bool ReduceManyTwiceFuses(const void* a, bool a_nontemporal, const void* b, bool b_nontemporal, size_t count,
                          DataType dtype, ReduceOp op, int divisor) {
  const TwoStores plan = PlanTwoStores(a, a_nontemporal, b, b_nontemporal, count * DataTypeSize(dtype));
  if (divisor > 1) return op == ReduceOp::kAvg && AverageFuses(dtype) && ManyTwiceAverageLoopFor(plan, dtype);
  return ManyTwiceLoopFor(plan, dtype, op) != nullptr;
}

namespace {
std::atomic<bool>& MisalignedRule() {
  static std::atomic<bool> on{false};
  return on;
}
}  // namespace

void SetMisalignedCopyRule(bool on) { MisalignedRule().store(on, std::memory_order_relaxed); }

bool MisalignedCopyRuleActive() {
  return MisalignedRule().load(std::memory_order_relaxed) && &Active() != &GetRegistry().tables[GetRegistry().count - 1];
}

const char* ActiveIsa() { return Active().name; }

bool ForceIsa(const char* isa) {
  if (isa == nullptr) return false;
  const Registry& registry = GetRegistry();
  const std::string_view name(isa);
  const IsaTable* chosen = nullptr;
  if (name == "auto") {
    chosen = &registry.tables[0];
  } else {
    for (int i = 0; i < registry.count; ++i) {
      if (name == registry.tables[i].name) chosen = &registry.tables[i];
    }
  }
  if (chosen == nullptr) return false;
  ActiveSlot().store(chosen, std::memory_order_release);
  return true;
}

std::vector<const char*> AvailableIsas() {
  const Registry& registry = GetRegistry();
  std::vector<const char*> names;
  for (int i = 0; i < registry.count; ++i) names.push_back(registry.tables[i].name);
  return names;
}

}  // namespace choir::kernels
