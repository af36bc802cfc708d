// Portable kernels: plain C++ loops for any CPU. They are also the fallback for
// table slots a SIMD file leaves empty. The compiler
// vectorizes most of them for the baseline ISA (SSE2 on x86-64).
//
// Thread-safety: pure functions and a constant table.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/half.h"
#include "kernels/isa.h"

#if CHOIR_KERNELS_X86
#include <emmintrin.h>
#endif

namespace choir::kernels {
namespace {

#include "kernels/divide_by_count.inc"

// How a stored element maps to the type arithmetic happens in.
template <class Elem>
struct Plain {
  using T = Elem;
  using Acc = Elem;
  static Acc Decode(T x) { return x; }
  static T Encode(Acc x) { return x; }
};
struct Half {
  using T = uint16_t;
  using Acc = float;
  static Acc Decode(T x) { return HalfToFloat(x); }
  static T Encode(Acc x) { return FloatToHalf(x); }
};
struct BFloat16 {
  using T = uint16_t;
  using Acc = float;
  static Acc Decode(T x) { return BFloat16ToFloat(x); }
  static T Encode(Acc x) { return FloatToBFloat16(x); }
};

// Integer arithmetic happens in an unsigned type of at least int's rank, so
// overflow wraps instead of being undefined (uint8_t would promote to int).
template <class A>
using Wide = std::common_type_t<std::make_unsigned_t<A>, unsigned>;

struct OpSum {
  template <class A>
  static A Apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return static_cast<A>(static_cast<Wide<A>>(a) + static_cast<Wide<A>>(b));
    } else {
      return a + b;
    }
  }
};
struct OpProd {
  template <class A>
  static A Apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return static_cast<A>(static_cast<Wide<A>>(a) * static_cast<Wide<A>>(b));
    } else {
      return a * b;
    }
  }
};
// NaN in either input gives NaN; on ties (-0 vs +0) `b` wins. Same as the
// SIMD kernels (MINPS semantics plus a NaN patch for `a`).
struct OpMin {
  template <class A>
  static A Apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return a < b ? a : b;
    } else {
      return (a < b || std::isnan(a)) ? a : b;
    }
  }
};
struct OpMax {
  template <class A>
  static A Apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return a > b ? a : b;
    } else {
      return (a > b || std::isnan(a)) ? a : b;
    }
  }
};
struct OpBand {
  template <class A>
  static A Apply(A a, A b) {
    return static_cast<A>(a & b);
  }
};
struct OpBor {
  template <class A>
  static A Apply(A a, A b) {
    return static_cast<A>(a | b);
  }
};
struct OpBxor {
  template <class A>
  static A Apply(A a, A b) {
    return static_cast<A>(a ^ b);
  }
};

template <class C, class Op>
void Binary(void* dst, const void* a, const void* b, size_t count) {
  using T = typename C::T;
  auto* d = static_cast<T*>(dst);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < count; ++i) {
    d[i] = C::Encode(Op::Apply(C::Decode(x[i]), C::Decode(y[i])));
  }
}

// Works through the buffer in blocks with a stack accumulator, so each inner
// loop streams one source (vectorizable, prefetch-friendly) and the 16-bit
// floats are rounded once. Streaming stores are not used here.
template <class C, class Op>
void Many(void* dst, const void* const* srcs, int k, size_t count, bool /*nontemporal*/) {
  using T = typename C::T;
  using Acc = typename C::Acc;
  constexpr size_t kBlock = 512;
  Acc acc[kBlock];
  auto* d = static_cast<T*>(dst);
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t n = std::min(kBlock, count - base);
    const T* first = static_cast<const T*>(srcs[0]) + base;
    for (size_t i = 0; i < n; ++i) acc[i] = C::Decode(first[i]);
    for (int j = 1; j < k; ++j) {
      const T* src = static_cast<const T*>(srcs[j]) + base;
      for (size_t i = 0; i < n; ++i) acc[i] = Op::Apply(acc[i], C::Decode(src[i]));
    }
    for (size_t i = 0; i < n; ++i) d[base + i] = C::Encode(acc[i]);
  }
}

template <class C>
void Divide(void* data, size_t count, int n) {
  using T = typename C::T;
  using Acc = typename C::Acc;
  if constexpr (std::is_integral_v<Acc>) {
    DivideIntegers<T>(data, count, n);
  } else {
    auto* p = static_cast<T*>(data);
    if (DividesByMultiplying(n)) {
      const Acc inverse = Acc{1} / static_cast<Acc>(n);
      for (size_t i = 0; i < count; ++i) p[i] = C::Encode(C::Decode(p[i]) * inverse);
      return;
    }
    const auto divisor = static_cast<Acc>(n);
    for (size_t i = 0; i < count; ++i) p[i] = C::Encode(C::Decode(p[i]) / divisor);
  }
}

// ManyAvgFn: the sum, then the division (the portable kernels' loops keep
// their own passes).
template <class C>
void ManyAverage(void* dst, const void* const* srcs, int k, size_t count, bool nontemporal, int divisor) {
  Many<C, OpSum>(dst, srcs, k, count, nontemporal);
  Divide<C>(dst, count, divisor);
}

// SSE2 (part of x86-64) copies with streaming (kStream) or plain stores;
// memcpy elsewhere.
template <bool kStream>
void CopySse2(void* dst, const void* src, size_t bytes) {
#if CHOIR_KERNELS_X86
  constexpr size_t kVec = 16;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  size_t head = (kVec - reinterpret_cast<uintptr_t>(d) % kVec) % kVec;
  if (head > bytes) head = bytes;
  std::memcpy(d, s, head);
  auto put = [](uint8_t* p, __m128i r) {
    if constexpr (kStream) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), r);
    } else {
      _mm_store_si128(reinterpret_cast<__m128i*>(p), r);
    }
  };
  size_t i = head;
  for (; i + 4 * kVec <= bytes; i += 4 * kVec) {
    const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + kVec));
    const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 2 * kVec));
    const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 3 * kVec));
    put(d + i, r0);
    put(d + i + kVec, r1);
    put(d + i + 2 * kVec, r2);
    put(d + i + 3 * kVec, r3);
  }
  std::memcpy(d + i, s + i, bytes - i);
  if constexpr (kStream) _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

void CopyNontemporal(void* dst, const void* src, size_t bytes) { CopySse2<true>(dst, src, bytes); }
void CopyVector(void* dst, const void* src, size_t bytes) { CopySse2<false>(dst, src, bytes); }

template <class C, class Op>
constexpr void SetOp(IsaTable& table, DataType type, ReduceOp op) {
  table.reduce[static_cast<int>(type)][static_cast<int>(op)] = &Binary<C, Op>;
  table.many[static_cast<int>(type)][static_cast<int>(op)] = &Many<C, Op>;
}

template <class C>
constexpr void SetType(IsaTable& table, DataType type) {
  SetOp<C, OpSum>(table, type, ReduceOp::kSum);
  SetOp<C, OpProd>(table, type, ReduceOp::kProd);
  SetOp<C, OpMin>(table, type, ReduceOp::kMin);
  SetOp<C, OpMax>(table, type, ReduceOp::kMax);
  if constexpr (std::is_integral_v<typename C::Acc>) {
    SetOp<C, OpBand>(table, type, ReduceOp::kBand);
    SetOp<C, OpBor>(table, type, ReduceOp::kBor);
    SetOp<C, OpBxor>(table, type, ReduceOp::kBxor);
  }
  table.divide[static_cast<int>(type)] = &Divide<C>;
  if constexpr (std::is_floating_point_v<typename C::T>) table.many_avg[static_cast<int>(type)] = &ManyAverage<C>;
}

consteval IsaTable MakeTable() {
  IsaTable table{};
  table.name = "generic";
  SetType<Plain<int8_t>>(table, DataType::kInt8);
  SetType<Plain<uint8_t>>(table, DataType::kUint8);
  SetType<Plain<int32_t>>(table, DataType::kInt32);
  SetType<Plain<int64_t>>(table, DataType::kInt64);
  SetType<Half>(table, DataType::kFloat16);
  SetType<BFloat16>(table, DataType::kBFloat16);
  SetType<Plain<float>>(table, DataType::kFloat32);
  SetType<Plain<double>>(table, DataType::kFloat64);
  table.copy_nontemporal = &CopyNontemporal;
  table.copy = &CopyVector;
  return table;
}

constexpr IsaTable kTable = MakeTable();

}  // namespace

const IsaTable& GenericTable() { return kTable; }

}  // namespace choir::kernels
