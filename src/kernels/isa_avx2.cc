// AVX2 + F16C kernels: 32-byte registers for CPUs without AVX-512. Tails and
// unaligned heads go through a register-sized stack buffer (AVX2 has no byte-
// or word-granular masked loads). int64 multiply and min/max, which AVX2 lacks,
// are built from 32-bit multiplies and 64-bit compares.
//
// Only this file's functions are compiled for AVX2 (push/pop of the target
// pragma, everything in an anonymous namespace, standard headers included
// before the pragma) so nothing AVX2 leaks into code that runs before the CPU
// check in reduce.cc.
//
// Thread-safety: pure functions and a constant table.
#include "kernels/isa.h"

#if CHOIR_KERNELS_X86

#include <immintrin.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif

namespace choir::kernels {
namespace {

constexpr size_t kVecBytes = 32;

// A zero-filled register-sized buffer for the elements of a tail.
template <class T>
struct TailBuffer {
  alignas(kVecBytes) T data[kVecBytes / sizeof(T)] = {};
};

template <class T>
TailBuffer<T> ReadTail(const T* p, size_t n) {
  TailBuffer<T> buffer;
  std::memcpy(buffer.data, p, n * sizeof(T));
  return buffer;
}

template <class Elem>
struct IntV {
  using T = Elem;
  using Reg = __m256i;
  static constexpr size_t kLanes = kVecBytes / sizeof(T);
  static constexpr bool kBitwise = true;
  static constexpr bool kFloat = false;

  static Reg Load(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void Store(T* p, Reg v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static void Stream(T* p, Reg v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v); }
  static Reg LoadPartial(const T* p, size_t n) { return Load(ReadTail(p, n).data); }
  static void StorePartial(T* p, Reg v, size_t n) {
    TailBuffer<T> buffer;
    Store(buffer.data, v);
    std::memcpy(p, buffer.data, n * sizeof(T));
  }

  // Two's complement add and multiply wrap identically for signed and unsigned.
  static Reg Add(Reg a, Reg b) {
    if constexpr (sizeof(T) == 1) {
      return _mm256_add_epi8(a, b);
    } else if constexpr (sizeof(T) == 4) {
      return _mm256_add_epi32(a, b);
    } else {
      return _mm256_add_epi64(a, b);
    }
  }
  static Reg Mul(Reg a, Reg b) {
    if constexpr (sizeof(T) == 1) {
      // No 8-bit multiply: multiply even and odd bytes as 16-bit lanes and
      // keep the low byte of each product.
      const __m256i even = _mm256_mullo_epi16(a, b);
      const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
      return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00FF)),
                             _mm256_slli_epi16(odd, 8));
    } else if constexpr (sizeof(T) == 4) {
      return _mm256_mullo_epi32(a, b);
    } else {
      // a*b mod 2^64 = lo(a)*lo(b) + ((lo(a)*hi(b) + hi(a)*lo(b)) << 32).
      const __m256i low_product = _mm256_mul_epu32(a, b);
      const __m256i cross = _mm256_mullo_epi32(a, _mm256_shuffle_epi32(b, 0xB1));
      const __m256i cross_sum = _mm256_add_epi32(cross, _mm256_srli_epi64(cross, 32));
      return _mm256_add_epi64(low_product, _mm256_slli_epi64(cross_sum, 32));
    }
  }
  static Reg Min(Reg a, Reg b) {
    if constexpr (std::is_same_v<T, int8_t>) {
      return _mm256_min_epi8(a, b);
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      return _mm256_min_epu8(a, b);
    } else if constexpr (std::is_same_v<T, int32_t>) {
      return _mm256_min_epi32(a, b);
    } else {
      static_assert(std::is_same_v<T, int64_t>);
      return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
    }
  }
  static Reg Max(Reg a, Reg b) {
    if constexpr (std::is_same_v<T, int8_t>) {
      return _mm256_max_epi8(a, b);
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      return _mm256_max_epu8(a, b);
    } else if constexpr (std::is_same_v<T, int32_t>) {
      return _mm256_max_epi32(a, b);
    } else {
      static_assert(std::is_same_v<T, int64_t>);
      return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b));
    }
  }
  static Reg And(Reg a, Reg b) { return _mm256_and_si256(a, b); }
  static Reg Or(Reg a, Reg b) { return _mm256_or_si256(a, b); }
  static Reg Xor(Reg a, Reg b) { return _mm256_xor_si256(a, b); }
};

// MINPS/MAXPS return the second operand when either input is NaN; blending in
// `a` where `a` is NaN makes the result NaN whenever either input is.
struct F32V {
  using T = float;
  using Reg = __m256;
  using Scalar = float;
  static constexpr size_t kLanes = 8;
  static constexpr bool kBitwise = false;
  static constexpr bool kFloat = true;

  static Reg Load(const T* p) { return _mm256_loadu_ps(p); }
  static void Store(T* p, Reg v) { _mm256_storeu_ps(p, v); }
  static void Stream(T* p, Reg v) { _mm256_stream_ps(p, v); }
  static Reg LoadPartial(const T* p, size_t n) { return Load(ReadTail(p, n).data); }
  static void StorePartial(T* p, Reg v, size_t n) {
    TailBuffer<T> buffer;
    Store(buffer.data, v);
    std::memcpy(p, buffer.data, n * sizeof(T));
  }
  static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg Div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg Set1(Scalar x) { return _mm256_set1_ps(x); }
  static Reg Min(Reg a, Reg b) {
    return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  static Reg Max(Reg a, Reg b) {
    return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
};

struct F64V {
  using T = double;
  using Reg = __m256d;
  using Scalar = double;
  static constexpr size_t kLanes = 4;
  static constexpr bool kBitwise = false;
  static constexpr bool kFloat = true;

  static Reg Load(const T* p) { return _mm256_loadu_pd(p); }
  static void Store(T* p, Reg v) { _mm256_storeu_pd(p, v); }
  static void Stream(T* p, Reg v) { _mm256_stream_pd(p, v); }
  static Reg LoadPartial(const T* p, size_t n) { return Load(ReadTail(p, n).data); }
  static void StorePartial(T* p, Reg v, size_t n) {
    TailBuffer<T> buffer;
    Store(buffer.data, v);
    std::memcpy(p, buffer.data, n * sizeof(T));
  }
  static Reg Add(Reg a, Reg b) { return _mm256_add_pd(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_pd(a, b); }
  static Reg Div(Reg a, Reg b) { return _mm256_div_pd(a, b); }
  static Reg Set1(Scalar x) { return _mm256_set1_pd(x); }
  static Reg Min(Reg a, Reg b) {
    return _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  static Reg Max(Reg a, Reg b) {
    return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
};

// 16 float16 values (one 32-byte vector) <-> two float32 registers with F16C;
// rounding fixed to nearest-even in the instruction.
struct F16Codec {
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  static __m256i Join(__m256 lo, __m256 hi) {
    return _mm256_set_m128i(_mm256_cvtps_ph(hi, kRound), _mm256_cvtps_ph(lo, kRound));
  }
  // Two 16-byte halves let the conversions take memory operands instead of
  // spending a shuffle on the split or the join.
  static void Load(const uint16_t* p, __m256* lo, __m256* hi) {
    *lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  }
  static void Store(uint16_t* p, __m256 lo, __m256 hi) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(lo, kRound));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), _mm256_cvtps_ph(hi, kRound));
  }
};

// 16 bfloat16 values <-> two float32 registers holding the even-indexed and
// the odd-indexed elements: a bfloat16 is the top half of a float32, so a
// shift or a mask converts without shuffles (the kernels are element-wise,
// so the element order inside the registers does not matter).
struct BF16Codec {
  // Rounds to nearest-even into the top 16 bits (the low bits become garbage).
  // NaNs need no special case, unlike in FloatToBFloat16: every NaN reaching
  // here is a widened bfloat16 input or a NaN the FPU produced from one (same
  // low bits, quiet bit set) or from nothing (0x?FC00000), so its low 16 bits
  // are zero and the increment cannot carry into the exponent.
  static __m256i Round(__m256 f) {
    const __m256i bits = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  }
  static __m256i Join(__m256 even, __m256 odd) {
    return _mm256_or_si256(_mm256_srli_epi32(Round(even), 16),
                           _mm256_and_si256(Round(odd), _mm256_set1_epi32(-65536)));
  }
  static void Load(const uint16_t* p, __m256* even, __m256* odd) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(raw, _mm256_set1_epi32(-65536)));
  }
  static void Store(uint16_t* p, __m256 even, __m256 odd) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Join(even, odd));
  }
};

// 16 float16/bfloat16 values (one 32-byte vector) as two float32 registers.
template <class Codec>
struct HalfV {
  using T = uint16_t;
  struct Reg {
    __m256 lo;
    __m256 hi;
  };
  using Scalar = float;
  static constexpr size_t kLanes = 16;
  static constexpr bool kBitwise = false;
  static constexpr bool kFloat = true;

  static Reg Load(const T* p) {
    Reg r;
    Codec::Load(p, &r.lo, &r.hi);
    return r;
  }
  static void Store(T* p, Reg v) { Codec::Store(p, v.lo, v.hi); }
  static void Stream(T* p, Reg v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), Codec::Join(v.lo, v.hi));
  }
  static Reg LoadPartial(const T* p, size_t n) { return Load(ReadTail(p, n).data); }
  static void StorePartial(T* p, Reg v, size_t n) {
    TailBuffer<T> buffer;
    Store(buffer.data, v);
    std::memcpy(p, buffer.data, n * sizeof(T));
  }
  static Reg Add(Reg a, Reg b) { return {F32V::Add(a.lo, b.lo), F32V::Add(a.hi, b.hi)}; }
  static Reg Mul(Reg a, Reg b) { return {F32V::Mul(a.lo, b.lo), F32V::Mul(a.hi, b.hi)}; }
  static Reg Min(Reg a, Reg b) { return {F32V::Min(a.lo, b.lo), F32V::Min(a.hi, b.hi)}; }
  static Reg Max(Reg a, Reg b) { return {F32V::Max(a.lo, b.lo), F32V::Max(a.hi, b.hi)}; }
  static Reg Div(Reg a, Reg b) { return {F32V::Div(a.lo, b.lo), F32V::Div(a.hi, b.hi)}; }
  static Reg Set1(Scalar x) { return {F32V::Set1(x), F32V::Set1(x)}; }
};

#include "kernels/simd_loops.inc"

consteval IsaTable MakeTable() {
  IsaTable table{};
  table.name = "avx2";
  SetType<IntV<int8_t>>(table, DataType::kInt8);
  SetType<IntV<uint8_t>>(table, DataType::kUint8);
  SetType<IntV<int32_t>>(table, DataType::kInt32);
  SetType<IntV<int64_t>>(table, DataType::kInt64);
  SetType<HalfV<F16Codec>>(table, DataType::kFloat16);
  SetType<HalfV<BF16Codec>>(table, DataType::kBFloat16);
  SetType<F32V>(table, DataType::kFloat32);
  SetType<F64V>(table, DataType::kFloat64);
  table.copy_nontemporal = &CopyNontemporal<IntV<uint8_t>>;
  table.copy = &CopyVector<IntV<uint8_t>>;
  SetCopyTwice<IntV<uint8_t>>(table);
  return table;
}

// Built at compile time: no AVX2 code runs before the CPU check.
constexpr IsaTable kTable = MakeTable();

}  // namespace
}  // namespace choir::kernels

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace choir::kernels {
const IsaTable* Avx2Table() { return &kTable; }
}  // namespace choir::kernels

#else  // !CHOIR_KERNELS_X86

namespace choir::kernels {
const IsaTable* Avx2Table() { return nullptr; }
}  // namespace choir::kernels

#endif  // CHOIR_KERNELS_X86
