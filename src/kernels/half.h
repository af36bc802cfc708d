// Scalar conversions between float32 and the two 16-bit float formats
// (IEEE binary16 "float16" and bfloat16). The portable kernels call these per
// element and the SIMD kernels reproduce them bit for bit in registers.
//
// Narrowing rounds to nearest-even (independent of the FPU rounding mode),
// overflows to infinity and produces subnormals. NaN stays NaN with the quiet
// bit set and the payload's high bits kept, matching what x86 F16C
// (VCVTPS2PH/VCVTPH2PS) does, so every ISA yields the same bits. Widening
// bfloat16 is a plain shift and keeps a signalling NaN signalling, as the
// vector code does.
//
// Thread-safety: pure functions.
#ifndef CHOIR_KERNELS_HALF_H_
#define CHOIR_KERNELS_HALF_H_

#include <bit>
#include <cstdint>

namespace choir::kernels {

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {  // Inf or NaN; NaN gets the quiet bit like VCVTPH2PS.
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13) | quiet);
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact and a normal float32, so no
    // normalisation loop is needed.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  // Rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t FloatToHalf(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {  // NaN: quiet it, keep the top payload bits.
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  // 65520 is halfway between the largest half (65504) and the next power of
  // two; the tie goes to the even pattern, which is infinity.
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (magnitude >= 0x38800000u) {  // Normal half (>= 2^-14).
    // Round the 13 dropped mantissa bits to nearest-even; a carry out of the
    // mantissa correctly bumps the exponent. Then rebias 127 -> 15.
    const uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  // 2^-25 is the tie between zero and the smallest subnormal; zero is even.
  if (magnitude <= 0x33000000u) return sign;
  // Subnormal half: count units of 2^-24, rounding the shifted-out bits.
  // The result may round up to 0x400, the smallest normal, which is correct.
  const uint32_t exponent = magnitude >> 23;  // 102..112 here
  const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24
  uint32_t units = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (units & 1u) != 0)) ++units;
  return static_cast<uint16_t>(sign | units);
}

inline float BFloat16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBFloat16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: truncating could clear every mantissa bit and make it Inf.
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  // Nearest-even on the low 16 bits; overflow carries into the exponent and
  // yields infinity, as it should.
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace choir::kernels

#endif  // CHOIR_KERNELS_HALF_H_
