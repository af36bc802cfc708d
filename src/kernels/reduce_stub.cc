// TEMPORARY scalar stand-in until the vectorized kernels land.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/reduce.h"

namespace choir::kernels {
namespace {
float H2F(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) { man <<= 1; --exp; }
      man &= 0x3ff;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t F2H(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) return static_cast<uint16_t>(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));
  if (absx >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);
  if (absx < 0x38800000) {  // subnormal or zero
    float a;
    std::memcpy(&a, &absx, 4);
    const float scaled = a * 16777216.0f;  // 2^24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t m = absx + 0xc8000fff + ((absx >> 13) & 1);
  return static_cast<uint16_t>(sign | (m >> 13));
}
float B2F(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint16_t F2B(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

template <typename T>
T Apply(ReduceOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case ReduceOp::kProd: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case ReduceOp::kMin: return a < b ? a : b;
      case ReduceOp::kMax: return a > b ? a : b;
      case ReduceOp::kBand: return a & b;
      case ReduceOp::kBor: return a | b;
      case ReduceOp::kBxor: return a ^ b;
    }
  } else {
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: return a + b;
      case ReduceOp::kProd: return a * b;
      case ReduceOp::kMin: return (std::isnan(a) || std::isnan(b)) ? NAN : (a < b ? a : b);
      case ReduceOp::kMax: return (std::isnan(a) || std::isnan(b)) ? NAN : (a > b ? a : b);
      default: return a;
    }
  }
  return a;
}

template <typename T, ReduceOp kOp>
void Kernel(void* dst, const void* a, const void* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T x, y;
    std::memcpy(&x, static_cast<const char*>(a) + i * sizeof(T), sizeof(T));
    std::memcpy(&y, static_cast<const char*>(b) + i * sizeof(T), sizeof(T));
    const T r = Apply<T>(kOp, x, y);
    std::memcpy(static_cast<char*>(dst) + i * sizeof(T), &r, sizeof(T));
  }
}
template <bool kBf, ReduceOp kOp>
void HalfKernel(void* dst, const void* a, const void* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t x, y;
    std::memcpy(&x, static_cast<const char*>(a) + i * 2, 2);
    std::memcpy(&y, static_cast<const char*>(b) + i * 2, 2);
    const float r = kBf ? Apply<float>(kOp, B2F(x), B2F(y)) : Apply<float>(kOp, H2F(x), H2F(y));
    const uint16_t o = kBf ? F2B(r) : F2H(r);
    std::memcpy(static_cast<char*>(dst) + i * 2, &o, 2);
  }
}

template <ReduceOp kOp>
ReduceFn ForOp(DataType t) {
  switch (t) {
    case DataType::kInt8: return Kernel<int8_t, kOp>;
    case DataType::kUint8: return Kernel<uint8_t, kOp>;
    case DataType::kInt32: return Kernel<int32_t, kOp>;
    case DataType::kInt64: return Kernel<int64_t, kOp>;
    case DataType::kFloat16: return HalfKernel<false, kOp>;
    case DataType::kBFloat16: return HalfKernel<true, kOp>;
    case DataType::kFloat32: return Kernel<float, kOp>;
    case DataType::kFloat64: return Kernel<double, kOp>;
  }
  return nullptr;
}
}  // namespace

ReduceFn GetReduceFn(DataType dtype, ReduceOp op) {
  if (!CheckReduceSupported(dtype, op).ok()) return nullptr;
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: return ForOp<ReduceOp::kSum>(dtype);
    case ReduceOp::kProd: return ForOp<ReduceOp::kProd>(dtype);
    case ReduceOp::kMin: return ForOp<ReduceOp::kMin>(dtype);
    case ReduceOp::kMax: return ForOp<ReduceOp::kMax>(dtype);
    case ReduceOp::kBand: return ForOp<ReduceOp::kBand>(dtype);
    case ReduceOp::kBor: return ForOp<ReduceOp::kBor>(dtype);
    case ReduceOp::kBxor: return ForOp<ReduceOp::kBxor>(dtype);
  }
  return nullptr;
}

void ReduceMany(void* dst, const void* const* srcs, int k, size_t count, DataType dtype,
                ReduceOp op, bool) {
  ReduceFn fn = GetReduceFn(dtype, op);
  if (k <= 0) return;
  if (dst != srcs[0]) std::memcpy(dst, srcs[0], count * DataTypeSize(dtype));
  for (int j = 1; j < k; ++j) fn(dst, dst, srcs[j], count);
}

void DivideByCount(void* data, size_t count, DataType dtype, int n) {
  for (size_t i = 0; i < count; ++i) {
    char* p = static_cast<char*>(data) + i * DataTypeSize(dtype);
    switch (dtype) {
      case DataType::kInt8: { int8_t v; std::memcpy(&v, p, 1); v = static_cast<int8_t>(v / n); std::memcpy(p, &v, 1); break; }
      case DataType::kUint8: { uint8_t v; std::memcpy(&v, p, 1); v = static_cast<uint8_t>(v / n); std::memcpy(p, &v, 1); break; }
      case DataType::kInt32: { int32_t v; std::memcpy(&v, p, 4); v /= n; std::memcpy(p, &v, 4); break; }
      case DataType::kInt64: { int64_t v; std::memcpy(&v, p, 8); v /= n; std::memcpy(p, &v, 8); break; }
      case DataType::kFloat16: { uint16_t v; std::memcpy(&v, p, 2); v = F2H(H2F(v) / static_cast<float>(n)); std::memcpy(p, &v, 2); break; }
      case DataType::kBFloat16: { uint16_t v; std::memcpy(&v, p, 2); v = F2B(B2F(v) / static_cast<float>(n)); std::memcpy(p, &v, 2); break; }
      case DataType::kFloat32: { float v; std::memcpy(&v, p, 4); v /= static_cast<float>(n); std::memcpy(p, &v, 4); break; }
      case DataType::kFloat64: { double v; std::memcpy(&v, p, 8); v /= n; std::memcpy(p, &v, 8); break; }
    }
  }
}

void CopyBytes(void* dst, const void* src, size_t bytes, bool) {
  if (bytes) std::memmove(dst, src, bytes);
}
float HalfToFloat(uint16_t h) { return H2F(h); }
uint16_t FloatToHalf(float f) { return F2H(f); }
float BFloat16ToFloat(uint16_t b) { return B2F(b); }
uint16_t FloatToBFloat16(float f) { return F2B(f); }
const char* ActiveIsa() { return "generic"; }
bool ForceIsa(const char*) { return false; }
}  // namespace choir::kernels
