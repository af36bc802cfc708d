// AVX-512 kernels (F + BW + VL + DQ): 64-byte registers, masked loads and
// stores for tails and unaligned heads, F16C-in-zmm conversions for float16
// and shift/round integer code for bfloat16.
//
// Only this file's functions are compiled for AVX-512 (push/pop of the target
// pragma, everything in an anonymous namespace so no inline function compiled
// here can be picked by the linker for a caller elsewhere). Standard headers
// are included before the pragma for the same reason. reduce.cc calls into
// this table only after checking the CPU.
//
// Thread-safety: pure functions and a constant table.
#include "kernels/isa.h"

#if CHOIR_KERNELS_X86

// GCC 12's AVX-512 headers pass _mm512_undefined_*() values as the unused
// merge operand of conversions, which trips -Wmaybe-uninitialized at -O3
// and -Wuninitialized at -O1
// (GCC bug 105593). The suppression must cover the header's
// lines, hence before the include; it ends at the bottom of the file.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__clang__)
#pragma clang attribute push( \
    __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512vl,avx512dq"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#endif

namespace choir::kernels {
namespace {

constexpr size_t kVecBytes = 64;

// The lowest n bits set (n <= 64), the mask selecting n leading lanes.
inline uint64_t LowBits(size_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

template <class Elem>
struct IntV {
  using T = Elem;
  using Reg = __m512i;
  static constexpr size_t kLanes = kVecBytes / sizeof(T);
  static constexpr bool kBitwise = true;
  static constexpr bool kFloat = false;

  static Reg Load(const T* p) { return _mm512_loadu_si512(p); }
  static void Store(T* p, Reg v) { _mm512_storeu_si512(p, v); }
  static void Stream(T* p, Reg v) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v); }
  static Reg LoadPartial(const T* p, size_t n) {
    if constexpr (sizeof(T) == 1) {
      return _mm512_maskz_loadu_epi8(LowBits(n), p);
    } else if constexpr (sizeof(T) == 4) {
      return _mm512_maskz_loadu_epi32(static_cast<__mmask16>(LowBits(n)), p);
    } else {
      return _mm512_maskz_loadu_epi64(static_cast<__mmask8>(LowBits(n)), p);
    }
  }
  static void StorePartial(T* p, Reg v, size_t n) {
    if constexpr (sizeof(T) == 1) {
      _mm512_mask_storeu_epi8(p, LowBits(n), v);
    } else if constexpr (sizeof(T) == 4) {
      _mm512_mask_storeu_epi32(p, static_cast<__mmask16>(LowBits(n)), v);
    } else {
      _mm512_mask_storeu_epi64(p, static_cast<__mmask8>(LowBits(n)), v);
    }
  }

  // Two's complement add and multiply wrap identically for signed and unsigned.
  static Reg Add(Reg a, Reg b) {
    if constexpr (sizeof(T) == 1) {
      return _mm512_add_epi8(a, b);
    } else if constexpr (sizeof(T) == 4) {
      return _mm512_add_epi32(a, b);
    } else {
      return _mm512_add_epi64(a, b);
    }
  }
  static Reg Mul(Reg a, Reg b) {
    if constexpr (sizeof(T) == 1) {
      // There is no 8-bit multiply. Multiply the even bytes and the odd bytes
      // as 16-bit lanes: the low byte of each 16-bit product is the wrapped
      // 8-bit product.
      const __m512i even = _mm512_mullo_epi16(a, b);
      const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
      return _mm512_mask_blend_epi8(0xAAAAAAAAAAAAAAAAull, even, _mm512_slli_epi16(odd, 8));
    } else if constexpr (sizeof(T) == 4) {
      return _mm512_mullo_epi32(a, b);
    } else {
      return _mm512_mullo_epi64(a, b);
    }
  }
  static Reg Min(Reg a, Reg b) {
    if constexpr (std::is_same_v<T, int8_t>) {
      return _mm512_min_epi8(a, b);
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      return _mm512_min_epu8(a, b);
    } else if constexpr (std::is_same_v<T, int32_t>) {
      return _mm512_min_epi32(a, b);
    } else {
      static_assert(std::is_same_v<T, int64_t>);
      return _mm512_min_epi64(a, b);
    }
  }
  static Reg Max(Reg a, Reg b) {
    if constexpr (std::is_same_v<T, int8_t>) {
      return _mm512_max_epi8(a, b);
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      return _mm512_max_epu8(a, b);
    } else if constexpr (std::is_same_v<T, int32_t>) {
      return _mm512_max_epi32(a, b);
    } else {
      static_assert(std::is_same_v<T, int64_t>);
      return _mm512_max_epi64(a, b);
    }
  }
  static Reg And(Reg a, Reg b) { return _mm512_and_si512(a, b); }
  static Reg Or(Reg a, Reg b) { return _mm512_or_si512(a, b); }
  static Reg Xor(Reg a, Reg b) { return _mm512_xor_si512(a, b); }
};

// MINPS/MAXPS return the second operand when either input is NaN; patching in
// `a` where `a` is NaN makes the result NaN whenever either input is.
struct F32V {
  using T = float;
  using Reg = __m512;
  using Scalar = float;
  static constexpr size_t kLanes = 16;
  static constexpr bool kBitwise = false;
  static constexpr bool kFloat = true;

  static Reg Load(const T* p) { return _mm512_loadu_ps(p); }
  static void Store(T* p, Reg v) { _mm512_storeu_ps(p, v); }
  static void Stream(T* p, Reg v) { _mm512_stream_ps(p, v); }
  static Reg LoadPartial(const T* p, size_t n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>(LowBits(n)), p);
  }
  static void StorePartial(T* p, Reg v, size_t n) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>(LowBits(n)), v);
  }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg Div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg Set1(Scalar x) { return _mm512_set1_ps(x); }
  static Reg Min(Reg a, Reg b) {
    return _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
  }
  static Reg Max(Reg a, Reg b) {
    return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
  }
};

struct F64V {
  using T = double;
  using Reg = __m512d;
  using Scalar = double;
  static constexpr size_t kLanes = 8;
  static constexpr bool kBitwise = false;
  static constexpr bool kFloat = true;

  static Reg Load(const T* p) { return _mm512_loadu_pd(p); }
  static void Store(T* p, Reg v) { _mm512_storeu_pd(p, v); }
  static void Stream(T* p, Reg v) { _mm512_stream_pd(p, v); }
  static Reg LoadPartial(const T* p, size_t n) {
    return _mm512_maskz_loadu_pd(static_cast<__mmask8>(LowBits(n)), p);
  }
  static void StorePartial(T* p, Reg v, size_t n) {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>(LowBits(n)), v);
  }
  static Reg Add(Reg a, Reg b) { return _mm512_add_pd(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_pd(a, b); }
  static Reg Div(Reg a, Reg b) { return _mm512_div_pd(a, b); }
  static Reg Set1(Scalar x) { return _mm512_set1_pd(x); }
  static Reg Min(Reg a, Reg b) {
    return _mm512_mask_mov_pd(_mm512_min_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
  }
  static Reg Max(Reg a, Reg b) {
    return _mm512_mask_mov_pd(_mm512_max_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
  }
};

// 32 float16 values (one 64-byte vector) <-> two float32 registers, with the
// F16C instructions' zmm forms; rounding is fixed to nearest-even in the
// instruction, whatever MXCSR says.
struct F16Codec {
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  static void Split(__m512i raw, __m512* lo, __m512* hi) {
    *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(raw));
    *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(raw, 1));
  }
  static __m512i Join(__m512 lo, __m512 hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(lo, kRound)),
                              _mm512_cvtps_ph(hi, kRound), 1);
  }
  // Full vectors: two 32-byte halves let the conversions take memory operands
  // instead of spending a shuffle on the split or the join.
  static void Load(const uint16_t* p, __m512* lo, __m512* hi) {
    *lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    *hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
  }
  static void Store(uint16_t* p, __m512 lo, __m512 hi) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(lo, kRound));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 16), _mm512_cvtps_ph(hi, kRound));
  }
};

// 32 bfloat16 values <-> two float32 registers holding the even-indexed and
// the odd-indexed elements. A bfloat16 is the top half of a float32, so each
// 32-bit lane of the raw vector already holds an odd element in float32
// position and an even element that one shift puts there: no shuffles either
// way (the kernels are element-wise, so which register holds which element
// does not matter). Narrowing rounds with integer ops rather than
// VCVTNEPS2BF16, which flushes subnormals and would not match FloatToBFloat16.
struct BF16Codec {
  static void Split(__m512i raw, __m512* even, __m512* odd) {
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32(-65536)));
  }
  // Rounds to nearest-even into the top 16 bits (the low bits become garbage).
  // NaNs need no special case, unlike in FloatToBFloat16: every NaN reaching
  // here is a widened bfloat16 input or a NaN the FPU produced from one (same
  // low bits, quiet bit set) or from nothing (0x?FC00000), so its low 16 bits
  // are zero and the increment cannot carry into the exponent.
  static __m512i Round(__m512 f) {
    const __m512i bits = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
  }
  static __m512i Join(__m512 even, __m512 odd) {
    return _mm512_or_si512(_mm512_srli_epi32(Round(even), 16),
                           _mm512_and_si512(Round(odd), _mm512_set1_epi32(-65536)));
  }
  static void Load(const uint16_t* p, __m512* even, __m512* odd) {
    Split(_mm512_loadu_si512(p), even, odd);
  }
  static void Store(uint16_t* p, __m512 even, __m512 odd) {
    _mm512_storeu_si512(p, Join(even, odd));
  }
};

// 32 float16/bfloat16 values (one 64-byte vector) as two float32 registers.
template <class Codec>
struct HalfV {
  using T = uint16_t;
  struct Reg {
    __m512 lo;
    __m512 hi;
  };
  using Scalar = float;
  static constexpr size_t kLanes = 32;
  static constexpr bool kBitwise = false;
  static constexpr bool kFloat = true;

  static Reg Unpack(__m512i raw) {
    Reg r;
    Codec::Split(raw, &r.lo, &r.hi);
    return r;
  }
  static Reg Load(const T* p) {
    Reg r;
    Codec::Load(p, &r.lo, &r.hi);
    return r;
  }
  static void Store(T* p, Reg v) { Codec::Store(p, v.lo, v.hi); }
  static void Stream(T* p, Reg v) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), Codec::Join(v.lo, v.hi));
  }
  static Reg LoadPartial(const T* p, size_t n) {
    return Unpack(_mm512_maskz_loadu_epi16(static_cast<__mmask32>(LowBits(n)), p));
  }
  static void StorePartial(T* p, Reg v, size_t n) {
    _mm512_mask_storeu_epi16(p, static_cast<__mmask32>(LowBits(n)), Codec::Join(v.lo, v.hi));
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
  table.name = "avx512";
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

// Built at compile time: no AVX-512 code runs before the CPU check.
constexpr IsaTable kTable = MakeTable();

}  // namespace
}  // namespace choir::kernels

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#pragma GCC diagnostic pop
#endif

namespace choir::kernels {
const IsaTable* Avx512Table() { return &kTable; }
}  // namespace choir::kernels

#else  // !CHOIR_KERNELS_X86

namespace choir::kernels {
const IsaTable* Avx512Table() { return nullptr; }
}  // namespace choir::kernels

#endif  // CHOIR_KERNELS_X86
