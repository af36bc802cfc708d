// Tests for the reduction and copy kernels: every dtype x op x ISA this CPU
// has, odd lengths and misaligned pointers, aliasing, streaming stores,
// special float values, and the 16-bit float conversions.
//
// The expected values come from a scalar reference written independently of
// the kernels: half decoding by ldexp, rounding to 16-bit floats by searching
// the sorted list of representable values, integer wrap-around through
// __int128. Results must match bit for bit, except that any NaN matches any
// NaN (payloads are not part of the contract).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/reduce.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace choir::kernels {
namespace {

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                  DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kFloat32, DataType::kFloat64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kAvg, ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor};
constexpr size_t kCounts[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 1000, 4099};

bool IsBitwise(ReduceOp op) {
  return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
}

// ---------------------------------------------------------------------------
// Reference 16-bit float formats.

float RefHalfToFloat(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  const float sign = (h & 0x8000) != 0 ? -1.0f : 1.0f;
  if (exponent == 0x1F) {
    return mantissa != 0 ? std::numeric_limits<float>::quiet_NaN()
                         : sign * std::numeric_limits<float>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
}

float RefBFloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;  // the definition of bfloat16
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Rounds a float to the nearest value of a 16-bit format by binary search over
// its positive finite values (bit patterns 0..inf_bits-1 are increasing).
// Ties go to the even bit pattern; beyond the largest finite value the next
// "value" is infinity, placed where the next binade would start.
class Nearest16 {
 public:
  Nearest16(float (*decode)(uint16_t), uint16_t inf_bits, double beyond_max)
      : inf_bits_(inf_bits), beyond_max_(beyond_max) {
    for (uint32_t b = 0; b < inf_bits; ++b) values_.push_back(decode(static_cast<uint16_t>(b)));
  }

  uint16_t Round(float f) const {
    if (std::isnan(f)) return static_cast<uint16_t>(inf_bits_ | 1);  // some NaN
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(f));
    const size_t upper = std::upper_bound(values_.begin(), values_.end(), a) - values_.begin();
    const size_t lower = upper - 1;  // values_[0] == 0 <= a
    if (values_[lower] == a) return static_cast<uint16_t>(sign | lower);
    const double next = upper < values_.size() ? values_[upper] : beyond_max_;
    const double midpoint = (values_[lower] + next) / 2;  // exact in double
    size_t pick;
    if (a < midpoint) {
      pick = lower;
    } else if (a > midpoint) {
      pick = upper;
    } else {
      pick = lower % 2 == 0 ? lower : upper;
    }
    return static_cast<uint16_t>(sign | pick);  // pick == inf_bits_ means infinity
  }

 private:
  std::vector<double> values_;
  uint16_t inf_bits_;
  double beyond_max_;
};

const Nearest16& HalfRounder() {
  static const Nearest16 rounder(&RefHalfToFloat, 0x7C00, 65536.0);
  return rounder;
}
const Nearest16& BFloat16Rounder() {
  static const Nearest16 rounder(&RefBFloat16ToFloat, 0x7F80, std::ldexp(1.0, 128));
  return rounder;
}

uint64_t BitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}
uint64_t BitsOf(double f) {
  uint64_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// ---------------------------------------------------------------------------
// Reference element types: storage T, arithmetic in Acc, Apply per op.

template <class Elem>
struct RefInt {
  using T = Elem;
  using Acc = Elem;
  static Acc Decode(T x) { return x; }
  static T Encode(Acc x) { return x; }
  static Acc Apply(ReduceOp op, Acc a, Acc b) {
    // Exact in 128 bits, then reduced modulo 2^bits by the conversion.
    const __int128 wa = a;
    const __int128 wb = b;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return static_cast<T>(wa + wb);
      case ReduceOp::kProd:
        return static_cast<T>(wa * wb);
      case ReduceOp::kMin:
        return std::min(a, b);
      case ReduceOp::kMax:
        return std::max(a, b);
      case ReduceOp::kBand:
        return static_cast<T>(a & b);
      case ReduceOp::kBor:
        return static_cast<T>(a | b);
      case ReduceOp::kBxor:
        return static_cast<T>(a ^ b);
    }
    return 0;
  }
  static T Divide(T x, int n) { return static_cast<T>(static_cast<long long>(x) / n); }
  static bool Same(T x, T y) { return x == y; }
  static std::string Show(T x) { return std::to_string(static_cast<long long>(x)); }
  static T Random(std::mt19937_64& rng) {
    const T specials[] = {
        std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), 0, static_cast<T>(-1), 1, 2};
    if (rng() % 8 == 0) return specials[rng() % std::size(specials)];
    return static_cast<T>(rng());
  }
};

// NaN in either input gives NaN; between equal values (-0, +0) `b` wins.
template <class A>
A RefFloatApply(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<A>::quiet_NaN();
      return a < b ? a : b;
    case ReduceOp::kMax:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<A>::quiet_NaN();
      return a > b ? a : b;
    default:
      ADD_FAILURE() << "bitwise op on a float";
      return 0;
  }
}

template <class Elem>
struct RefFloat {
  using T = Elem;
  using Acc = Elem;
  static Acc Decode(T x) { return x; }
  static T Encode(Acc x) { return x; }
  static Acc Apply(ReduceOp op, Acc a, Acc b) { return RefFloatApply(op, a, b); }
  static T Divide(T x, int n) { return x / static_cast<T>(n); }
  static bool Same(T x, T y) { return (std::isnan(x) && std::isnan(y)) || BitsOf(x) == BitsOf(y); }
  static std::string Show(T x) {
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%a (0x%llx)", static_cast<double>(x),
                  static_cast<unsigned long long>(BitsOf(x)));
    return buffer;
  }
  static T Random(std::mt19937_64& rng) {
    using L = std::numeric_limits<T>;
    const T specials[] = {L::quiet_NaN(), -L::quiet_NaN(), L::signaling_NaN(),
                          L::infinity(),  -L::infinity(),  T(0),
                          -T(0),          L::denorm_min(), -L::denorm_min(),
                          L::min(),       L::max(),        L::lowest(),
                          T(1),           T(-1),           T(0.5)};
    switch (rng() % 4) {
      case 0:
        return specials[rng() % std::size(specials)];
      case 1: {  // any bit pattern: every exponent, subnormals, NaN payloads
        T x;
        const uint64_t bits = rng();
        std::memcpy(&x, &bits, sizeof(x));
        return x;
      }
      default:  // ordinary values, so sums and products stay finite
        return static_cast<T>(std::uniform_real_distribution<double>(-100, 100)(rng));
    }
  }
};

template <bool kBFloat16>
struct RefHalf {
  using T = uint16_t;
  using Acc = float;
  static Acc Decode(T x) { return kBFloat16 ? RefBFloat16ToFloat(x) : RefHalfToFloat(x); }
  static T Encode(Acc x) { return (kBFloat16 ? BFloat16Rounder() : HalfRounder()).Round(x); }
  static Acc Apply(ReduceOp op, Acc a, Acc b) { return RefFloatApply(op, a, b); }
  static T Divide(T x, int n) { return Encode(Decode(x) / static_cast<float>(n)); }
  static bool Same(T x, T y) { return (std::isnan(Decode(x)) && std::isnan(Decode(y))) || x == y; }
  static std::string Show(T x) {
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "0x%04x (%g)", x, static_cast<double>(Decode(x)));
    return buffer;
  }
  static T Random(std::mt19937_64& rng) {
    const T half_specials[] = {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01,
                               0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00};
    const T bf16_specials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81,
                               0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80};
    switch (rng() % 4) {
      case 0:
        return kBFloat16 ? bf16_specials[rng() % std::size(bf16_specials)]
                         : half_specials[rng() % std::size(half_specials)];
      case 1:
        return static_cast<T>(rng());
      default:
        return Encode(static_cast<float>(std::uniform_real_distribution<double>(-8, 8)(rng)));
    }
  }
};

// Calls f(RefX{}) for the reference type of `type`.
template <class F>
void VisitRef(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8:
      return f(RefInt<int8_t>{});
    case DataType::kUint8:
      return f(RefInt<uint8_t>{});
    case DataType::kInt32:
      return f(RefInt<int32_t>{});
    case DataType::kInt64:
      return f(RefInt<int64_t>{});
    case DataType::kFloat16:
      return f(RefHalf<false>{});
    case DataType::kBFloat16:
      return f(RefHalf<true>{});
    case DataType::kFloat32:
      return f(RefFloat<float>{});
    case DataType::kFloat64:
      return f(RefFloat<double>{});
  }
  FAIL() << "bad type";
}

// ---------------------------------------------------------------------------
// Buffers with exact ends (ASan sees any read past them), a 64-byte-aligned
// base, and guard bytes around outputs to catch stray writes.

constexpr size_t kGuardBytes = 64;
constexpr uint8_t kGuardByte = 0xA5;

class Buffer {
 public:
  // `offset` elements past a 64-byte boundary; `guarded` adds guard bytes on
  // both sides (for outputs).
  Buffer(size_t elem_size, size_t count, size_t offset, bool guarded)
      : front_((guarded ? kGuardBytes : 0) + offset * elem_size),
        bytes_(count * elem_size),
        back_(guarded ? kGuardBytes : 0) {
    void* base = nullptr;
    EXPECT_EQ(posix_memalign(&base, 64, std::max<size_t>(front_ + bytes_ + back_, 1)), 0);
    base_ = static_cast<uint8_t*>(base);
    std::memset(base_, kGuardByte, front_ + bytes_ + back_);
  }
  ~Buffer() { std::free(base_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() { return base_ + front_; }
  bool GuardsIntact() const {
    const size_t guard = back_;  // guarded buffers have equal-size front guards
    for (size_t i = 0; i < guard; ++i) {
      if (base_[i] != kGuardByte || base_[front_ + bytes_ + i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  size_t front_;
  size_t bytes_;
  size_t back_;
  uint8_t* base_ = nullptr;
};

// Offsets (in elements) for dst, a and b: aligned, all shifted alike, and
// mutually misaligned, including odd byte addresses for 1-byte types.
struct Layout {
  size_t dst, a, b;
};
constexpr Layout kLayouts[] = {{0, 0, 0}, {1, 1, 1}, {1, 2, 3}, {3, 0, 5}, {7, 5, 1}, {0, 9, 2}};

enum class Alias { kNone, kDstIsA, kDstIsB };

class KernelsTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_TRUE(ForceIsa("auto")); }
};

// Calls f(type, op) for every ISA this CPU has, every dtype and every op the
// dtype supports, each named in the trace; stops at the first fatal failure.
template <class F>
void ForEveryIsaTypeAndOp(F&& f) {
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    for (DataType type : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        if (IsBitwise(op) && IsFloatingPoint(type)) continue;
        SCOPED_TRACE(std::string(DataTypeName(type)) + " " + ReduceOpName(op));
        f(type, op);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Binary kernels.

template <class R>
void RunBinary(DataType type, ReduceOp op, size_t count, const Layout& layout, Alias alias,
               std::mt19937_64& rng) {
  using T = typename R::T;
  SCOPED_TRACE("count " + std::to_string(count) + ", offsets " + std::to_string(layout.dst) + "/" +
               std::to_string(layout.a) + "/" + std::to_string(layout.b) + ", alias " +
               std::to_string(static_cast<int>(alias)));
  const ReduceFn fn = GetReduceFn(type, op);
  ASSERT_NE(fn, nullptr);
  Buffer a_buf(sizeof(T), count, layout.a, alias == Alias::kDstIsA);
  Buffer b_buf(sizeof(T), count, layout.b, alias == Alias::kDstIsB);
  Buffer d_buf(sizeof(T), count, layout.dst, true);
  T* a = static_cast<T*>(a_buf.data());
  T* b = static_cast<T*>(b_buf.data());
  std::vector<T> a_copy(count), b_copy(count), expected(count);
  for (size_t i = 0; i < count; ++i) {
    a_copy[i] = a[i] = R::Random(rng);
    b_copy[i] = b[i] = R::Random(rng);
    expected[i] = R::Encode(R::Apply(op, R::Decode(a[i]), R::Decode(b[i])));
  }
  T* dst = alias == Alias::kDstIsA   ? a
           : alias == Alias::kDstIsB ? b
                                     : static_cast<T*>(d_buf.data());
  fn(dst, a, b, count);
  for (size_t i = 0; i < count; ++i) {
    if (!R::Same(dst[i], expected[i])) {
      FAIL() << "element " << i << ": " << R::Show(a_copy[i]) << " " << ReduceOpName(op) << " "
             << R::Show(b_copy[i]) << " gave " << R::Show(dst[i]) << ", want "
             << R::Show(expected[i]);
    }
  }
  EXPECT_TRUE(a_buf.GuardsIntact() && b_buf.GuardsIntact() && d_buf.GuardsIntact())
      << "wrote outside the output";
}

TEST_F(KernelsTest, BinaryEveryTypeOpIsaCountAndLayout) {
  std::mt19937_64 rng(1);
  ForEveryIsaTypeAndOp([&](DataType type, ReduceOp op) {
    int variant = 0;
    for (size_t count : kCounts) {
      for (const Layout& layout : kLayouts) {
        const auto alias = static_cast<Alias>(variant++ % 3);
        VisitRef(type, [&](auto ref) { RunBinary<decltype(ref)>(type, op, count, layout, alias, rng); });
        if (HasFatalFailure()) return;
      }
    }
  });
}

// ---------------------------------------------------------------------------
// ReduceMany.

// `divisor` above 1: an average divided before the stores (ReduceMany's
// divisor), which must give the sum divided as DivideByCount does.
template <class R>
void RunMany(DataType type, ReduceOp op, int k, size_t count, size_t dst_offset, bool alias,
             bool nontemporal, std::mt19937_64& rng, int divisor = 1) {
  using T = typename R::T;
  SCOPED_TRACE("k " + std::to_string(k) + ", count " + std::to_string(count) + ", dst offset " +
               std::to_string(dst_offset) + (alias ? ", dst==srcs[0]" : "") +
               (nontemporal ? ", nontemporal" : "") + ", divisor " + std::to_string(divisor));
  std::vector<std::unique_ptr<Buffer>> bufs;
  std::vector<const void*> srcs;
  std::vector<std::vector<T>> inputs(k, std::vector<T>(count));
  for (int j = 0; j < k; ++j) {
    // Source offsets vary so every source has a different misalignment.
    const size_t offset = j == 0 && alias ? dst_offset : static_cast<size_t>(j * 3 % 7);
    bufs.push_back(std::make_unique<Buffer>(sizeof(T), count, offset, j == 0 && alias));
    T* p = static_cast<T*>(bufs.back()->data());
    for (size_t i = 0; i < count; ++i) inputs[j][i] = p[i] = R::Random(rng);
    srcs.push_back(p);
  }
  Buffer d_buf(sizeof(T), count, dst_offset, true);
  T* dst = alias ? static_cast<T*>(bufs[0]->data()) : static_cast<T*>(d_buf.data());
  ReduceMany(dst, srcs.data(), k, count, type, op, nontemporal, divisor);
  for (size_t i = 0; i < count; ++i) {
    typename R::Acc acc = R::Decode(inputs[0][i]);
    for (int j = 1; j < k; ++j) acc = R::Apply(op, acc, R::Decode(inputs[j][i]));
    // One input is a plain copy, NaN bits included.
    const T sum = k == 1 ? inputs[0][i] : R::Encode(acc);
    const T expected = divisor > 1 ? R::Divide(sum, divisor) : sum;
    if (!R::Same(dst[i], expected)) {
      std::string in;
      for (int j = 0; j < k; ++j) in += R::Show(inputs[j][i]) + " ";
      FAIL() << "element " << i << ": " << ReduceOpName(op) << " of " << in << "gave "
             << R::Show(dst[i]) << ", want " << R::Show(expected);
    }
  }
  for (auto& b : bufs) EXPECT_TRUE(b->GuardsIntact());
  EXPECT_TRUE(d_buf.GuardsIntact()) << "wrote outside the output";
}

TEST_F(KernelsTest, ManyEveryTypeOpIsaAndSourceCount) {
  constexpr size_t kManyCounts[] = {0, 1, 17, 65, 300, 1029};
  std::mt19937_64 rng(2);
  ForEveryIsaTypeAndOp([&](DataType type, ReduceOp op) {
    int variant = 0;
    for (int k = 1; k <= 9; ++k) {
      for (size_t count : kManyCounts) {
        // Rotate through aliasing, streaming and dst alignment (offset 0
        // is 64-byte aligned, so the streaming path runs without a head).
        const int v = variant++;
        const bool alias = v % 2 == 1;
        const bool nontemporal = v % 4 >= 2;
        const size_t dst_offset = static_cast<size_t>(v % 3) * 5;
        VisitRef(type, [&](auto ref) {
          RunMany<decltype(ref)>(type, op, k, count, dst_offset, alias, nontemporal, rng);
        });
        if (HasFatalFailure()) return;
      }
    }
  });
}

// Long enough for many streaming iterations, with aligned and unaligned dst.
TEST_F(KernelsTest, ManyNontemporalLarge) {
  std::mt19937_64 rng(3);
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                          DataType::kInt8, DataType::kFloat64}) {
      SCOPED_TRACE(DataTypeName(type));
      for (size_t dst_offset : {0, 1, 3}) {
        for (bool alias : {false, true}) {
          VisitRef(type, [&](auto ref) {
            RunMany<decltype(ref)>(type, ReduceOp::kSum, 3, 100003, dst_offset, alias, true, rng);
          });
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// ReduceManyTwice: the result of ReduceMany stored to two destinations.

// How a ReduceManyTwice case places its destinations: element offsets past a
// 64-byte boundary, the store kinds asked, and which destination (if any)
// is the first source itself (in place).
struct TwiceCase {
  size_t a_offset, b_offset;
  bool a_nt, b_nt;
  int alias;  // 0 none, 1 a is srcs[0], 2 b is srcs[0], 3 b is the last source
};

template <class R>
void RunManyTwice(DataType type, ReduceOp op, int k, size_t count, const TwiceCase& t, std::mt19937_64& rng,
                  int divisor = 1) {
  using T = typename R::T;
  SCOPED_TRACE("k " + std::to_string(k) + ", count " + std::to_string(count) + ", offsets " +
               std::to_string(t.a_offset) + "/" + std::to_string(t.b_offset) + ", nt " + std::to_string(t.a_nt) +
               std::to_string(t.b_nt) + ", alias " + std::to_string(t.alias) + ", divisor " +
               std::to_string(divisor));
  std::vector<std::unique_ptr<Buffer>> bufs;
  std::vector<const void*> srcs;
  std::vector<std::vector<T>> inputs(k, std::vector<T>(count));
  const int aliased = t.alias == 3 ? k - 1 : 0;  // the source a destination is, if any
  for (int j = 0; j < k; ++j) {
    const bool is_dst = t.alias != 0 && j == aliased;
    const size_t offset = is_dst ? (t.alias == 1 ? t.a_offset : t.b_offset) : static_cast<size_t>(j * 3 % 7);
    bufs.push_back(std::make_unique<Buffer>(sizeof(T), count, offset, is_dst));
    T* p = static_cast<T*>(bufs.back()->data());
    for (size_t i = 0; i < count; ++i) inputs[j][i] = p[i] = R::Random(rng);
    srcs.push_back(p);
  }
  Buffer a_buf(sizeof(T), count, t.a_offset, true);
  Buffer b_buf(sizeof(T), count, t.b_offset, true);
  T* a = t.alias == 1 ? static_cast<T*>(bufs[static_cast<size_t>(aliased)]->data()) : static_cast<T*>(a_buf.data());
  T* b = t.alias >= 2 ? static_cast<T*>(bufs[static_cast<size_t>(aliased)]->data()) : static_cast<T*>(b_buf.data());
  ReduceManyTwice(a, t.a_nt, b, t.b_nt, srcs.data(), k, count, type, op, divisor);
  for (size_t i = 0; i < count; ++i) {
    typename R::Acc acc = R::Decode(inputs[0][i]);
    for (int j = 1; j < k; ++j) acc = R::Apply(op, acc, R::Decode(inputs[j][i]));
    const T sum = k == 1 ? inputs[0][i] : R::Encode(acc);
    const T expected = divisor > 1 ? R::Divide(sum, divisor) : sum;
    if (!R::Same(a[i], expected) || !R::Same(b[i], expected)) {
      FAIL() << "element " << i << ": " << ReduceOpName(op) << " gave " << R::Show(a[i]) << " and "
             << R::Show(b[i]) << ", want " << R::Show(expected);
    }
  }
  for (auto& buf : bufs) EXPECT_TRUE(buf->GuardsIntact());
  EXPECT_TRUE(a_buf.GuardsIntact() && b_buf.GuardsIntact()) << "wrote outside the outputs";
}

// Every dtype, op and ISA, one to three sources, each length with every
// case: store kinds, offsets alike and different within a line, in place
// (a destination that is the first or the last source).
// The lengths in bytes straddle kMinCopyTwiceBytes (below it: the two
// steps) and kMinNontemporalBytes (below it nothing streams).
TEST_F(KernelsTest, ManyTwiceEveryTypeOpIsaAndSourceCount) {
  constexpr size_t kTwiceBytes[] = {0, 1, 17 * 8, kMinCopyTwiceBytes + 24, kMinNontemporalBytes + 77};
  constexpr TwiceCase kCases[] = {{0, 0, false, false, 0}, {0, 0, true, false, 0}, {5, 5, true, true, 1},
                                  {0, 3, false, true, 2},  {7, 1, true, true, 0},  {3, 0, true, false, 2},
                                  {5, 5, true, true, 3},   {0, 3, true, false, 3}};
  std::mt19937_64 rng(7);
  ForEveryIsaTypeAndOp([&](DataType type, ReduceOp op) {
    for (int k = 1; k <= 3; ++k) {
      for (size_t bytes : kTwiceBytes) {
        const size_t count = bytes / DataTypeSize(type) + (bytes == 1 ? 1 : 0);
        for (const TwiceCase& t : kCases) {
          VisitRef(type, [&](auto ref) { RunManyTwice<decltype(ref)>(type, op, k, count, t, rng); });
          if (HasFatalFailure()) return;
        }
      }
    }
  });
}

// Sums past kMinNontemporalBytes with every store kind, offset pair and
// alias, for each width of element (the 16-bit floats convert before they
// stream) and with the source count fixed (2) or not (3).
TEST_F(KernelsTest, ManyTwiceLargeEveryStoreKind) {
  std::mt19937_64 rng(8);
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kInt8,
                          DataType::kFloat64}) {
      SCOPED_TRACE(DataTypeName(type));
      const size_t es = DataTypeSize(type);
      const size_t counts[] = {kMinNontemporalBytes / es - 1, kMinNontemporalBytes / es,
                               (kMinNontemporalBytes + 77) / es + 1,
                               type == DataType::kFloat32 ? size_t{100003} : size_t{0}};
      for (int k = 2; k <= 3; ++k) {
        for (size_t count : counts) {
          // Three sources: past the threshold, not in place, is enough.
          if (count == 0 || (k == 3 && count != counts[2])) continue;
          for (int stores = 0; stores < 4; ++stores) {
            for (const auto& [a_offset, b_offset] : {std::pair<size_t, size_t>{0, 0}, {0, 4}, {3, 3}, {3, 1}}) {
              for (int alias = 0; alias < (k == 2 ? 4 : 1); ++alias) {
                const TwiceCase t{a_offset, b_offset, (stores & 1) != 0, (stores & 2) != 0, alias};
                VisitRef(type, [&](auto ref) {
                  RunManyTwice<decltype(ref)>(type, ReduceOp::kSum, k, count, t, rng);
                });
                if (HasFatalFailure()) return;
              }
            }
          }
        }
      }
    }
  }
}

// avg in one pass (ReduceMany's and ReduceManyTwice's divisor): float32
// and float64 only, the same bits as the sum divided apart, for divisors
// that multiply (powers of two) and that divide, every ISA, one to five
// sources (two: the loop with its count fixed), every store kind, offset
// and alias, short and past the streaming threshold.
TEST_F(KernelsTest, AveragesDividedBeforeTheStoresMatchTheSumDividedApart) {
  EXPECT_TRUE(AverageFuses(DataType::kFloat32));
  EXPECT_TRUE(AverageFuses(DataType::kFloat64));
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16, DataType::kInt8, DataType::kUint8, DataType::kInt32,
                     DataType::kInt64}) {
    EXPECT_FALSE(AverageFuses(t)) << DataTypeName(t);
  }
  constexpr TwiceCase kCases[] = {{0, 0, false, false, 0}, {0, 0, true, false, 0}, {5, 5, true, true, 1},
                                  {0, 3, false, true, 2},  {7, 1, true, true, 0},  {5, 5, true, true, 3}};
  std::mt19937_64 rng(12);
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    for (DataType type : {DataType::kFloat32, DataType::kFloat64}) {
      SCOPED_TRACE(DataTypeName(type));
      const size_t es = DataTypeSize(type);
      for (int divisor : {2, 3, 4, 7, 8, 1 << 20}) {
        for (int k = 1; k <= 5; ++k) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{29}, kMinCopyTwiceBytes / es + 3,
                               (kMinNontemporalBytes + 77) / es}) {
            for (int variant = 0; variant < 4; ++variant) {
              VisitRef(type, [&](auto ref) {
                RunMany<decltype(ref)>(type, ReduceOp::kAvg, k, count, static_cast<size_t>(variant % 3) * 5,
                                       variant % 2 == 1, variant >= 2, rng, divisor);
              });
            }
            for (const TwiceCase& t : kCases) {
              VisitRef(type, [&](auto ref) {
                RunManyTwice<decltype(ref)>(type, ReduceOp::kAvg, k, count, t, rng, divisor);
              });
            }
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST_F(KernelsTest, ManyTwiceFusesWhereTheLoopCanRun) {
  alignas(64) static float a[16 * 1024];
  alignas(64) static float b[16 * 1024 + 16];
  const size_t big = 8 * 1024;  // 32 KiB of float32: past kMinNontemporalBytes
  const DataType f32 = DataType::kFloat32;
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    const bool vector = std::string(isa) != "generic";
    EXPECT_EQ(ReduceManyTwiceFuses(a, false, b + 4, false, big, f32, ReduceOp::kSum), vector);
    EXPECT_EQ(ReduceManyTwiceFuses(a, true, b + 4, false, big, f32, ReduceOp::kMax), vector);
    EXPECT_EQ(ReduceManyTwiceFuses(a, false, b + 4, true, big, f32, ReduceOp::kAvg), vector);  // b goes first
    EXPECT_EQ(ReduceManyTwiceFuses(a, true, b + 16, true, big, f32, ReduceOp::kSum), vector);  // same offset
    EXPECT_FALSE(ReduceManyTwiceFuses(a, true, b + 4, true, big, f32, ReduceOp::kSum));        // offsets differ
    EXPECT_EQ(ReduceManyTwiceFuses(a, false, b, false, kMinCopyTwiceBytes / 4, f32, ReduceOp::kSum), vector);
    EXPECT_FALSE(ReduceManyTwiceFuses(a, false, b, false, kMinCopyTwiceBytes / 4 - 1, f32, ReduceOp::kSum));
    // Outside the enums: never one pass (and ReduceManyTwice refuses such a call).
    EXPECT_FALSE(ReduceManyTwiceFuses(a, false, b, false, big, f32, static_cast<ReduceOp>(99)));
    // An average divided before the stores: the SIMD loops only, float32 and float64.
    EXPECT_EQ(ReduceManyTwiceFuses(a, false, b + 4, false, big, f32, ReduceOp::kAvg, 2), vector);
    EXPECT_EQ(ReduceManyTwiceFuses(a, true, b + 16, true, big, f32, ReduceOp::kAvg, 3), vector);
    EXPECT_FALSE(ReduceManyTwiceFuses(a, true, b + 4, true, big, f32, ReduceOp::kAvg, 2));  // offsets differ
    EXPECT_FALSE(ReduceManyTwiceFuses(a, false, b + 4, false, big, DataType::kBFloat16, ReduceOp::kAvg, 2));
  }
}

// Hand-picked special values against each other, every pair, every ISA: the
// random inputs hit these too, but not every combination.
TEST_F(KernelsTest, FloatSpecialValuePairs) {
  const float f[] = {0.0f,
                     -0.0f,
                     1.0f,
                     -1.0f,
                     std::numeric_limits<float>::infinity(),
                     -std::numeric_limits<float>::infinity(),
                     std::numeric_limits<float>::quiet_NaN(),
                     -std::numeric_limits<float>::quiet_NaN(),
                     std::numeric_limits<float>::denorm_min(),
                     3.0e38f,
                     -3.0e38f,
                     1e-40f};
  const size_t n = std::size(f);
  std::vector<float> a, b;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      a.push_back(f[i]);
      b.push_back(f[j]);
    }
  }
  // The same pairs as float16 and bfloat16 (the conversion handles overflow).
  std::vector<uint16_t> ah, bh, ab, bb;
  for (size_t i = 0; i < a.size(); ++i) {
    ah.push_back(FloatToHalf(a[i]));
    bh.push_back(FloatToHalf(b[i]));
    ab.push_back(FloatToBFloat16(a[i]));
    bb.push_back(FloatToBFloat16(b[i]));
  }
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
      SCOPED_TRACE(ReduceOpName(op));
      std::vector<float> out(a.size());
      GetReduceFn(DataType::kFloat32, op)(out.data(), a.data(), b.data(), a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(RefFloat<float>::Same(out[i], RefFloatApply(op, a[i], b[i])))
            << a[i] << " " << b[i] << " -> " << out[i];
      }
      std::vector<uint16_t> out16(a.size());
      GetReduceFn(DataType::kFloat16, op)(out16.data(), ah.data(), bh.data(), a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        using R = RefHalf<false>;
        ASSERT_TRUE(R::Same(out16[i], R::Encode(R::Apply(op, R::Decode(ah[i]), R::Decode(bh[i])))))
            << R::Show(ah[i]) << " " << R::Show(bh[i]) << " -> " << R::Show(out16[i]);
      }
      GetReduceFn(DataType::kBFloat16, op)(out16.data(), ab.data(), bb.data(), a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        using R = RefHalf<true>;
        ASSERT_TRUE(R::Same(out16[i], R::Encode(R::Apply(op, R::Decode(ab[i]), R::Decode(bb[i])))))
            << R::Show(ab[i]) << " " << R::Show(bb[i]) << " -> " << R::Show(out16[i]);
      }
    }
  }
}

TEST_F(KernelsTest, MinMaxPropagateNaNFromEitherSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    std::vector<float> a(37, 1.0f), b(37, 2.0f), out(37);
    a[3] = nan;
    b[20] = nan;
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      GetReduceFn(DataType::kFloat32, op)(out.data(), a.data(), b.data(), a.size());
      EXPECT_TRUE(std::isnan(out[3]));
      EXPECT_TRUE(std::isnan(out[20]));
      EXPECT_EQ(out[4], op == ReduceOp::kMin ? 1.0f : 2.0f);
    }
  }
}

// ---------------------------------------------------------------------------
// DivideByCount.

template <class R>
void RunDivide(DataType type, size_t count, int n, size_t offset, std::mt19937_64& rng) {
  using T = typename R::T;
  SCOPED_TRACE("count " + std::to_string(count) + ", n " + std::to_string(n) + ", offset " + std::to_string(offset));
  Buffer buf(sizeof(T), count, offset, true);
  T* p = static_cast<T*>(buf.data());
  std::vector<T> input(count);
  for (size_t i = 0; i < count; ++i) input[i] = p[i] = R::Random(rng);
  DivideByCount(p, count, type, n);
  for (size_t i = 0; i < count; ++i) {
    const T expected = R::Divide(input[i], n);
    if (!R::Same(p[i], expected)) {
      FAIL() << "element " << i << ": " << R::Show(input[i]) << " / " << n << " gave "
             << R::Show(p[i]) << ", want " << R::Show(expected);
    }
  }
  EXPECT_TRUE(buf.GuardsIntact());
}

TEST_F(KernelsTest, DivideByCountEveryType) {
  std::mt19937_64 rng(4);
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    for (DataType type : kAllTypes) {
      SCOPED_TRACE(DataTypeName(type));
      // Powers of two multiply (floats) or shift (integers): 256 and 2^30
      // take float16 and bfloat16 results below their smallest normal.
      for (int n : {1, 2, 3, 7, 8, 200, 256, 1 << 30}) {
        for (size_t count : {0, 1, 17, 33, 1000}) {
          // Offset 0 starts on a 64-byte boundary; the others take a head
          // before the first whole vector.
          for (size_t offset : {0, 1, 5}) {
            VisitRef(type, [&](auto ref) { RunDivide<decltype(ref)>(type, count, n, offset, rng); });
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST_F(KernelsTest, DivideTruncatesTowardZero) {
  int32_t v[] = {-7, 7, -1, 1, -8, std::numeric_limits<int32_t>::min()};
  DivideByCount(v, std::size(v), DataType::kInt32, 2);
  EXPECT_EQ(std::vector<int32_t>(std::begin(v), std::end(v)),
            (std::vector<int32_t>{-3, 3, 0, 0, -4, std::numeric_limits<int32_t>::min() / 2}));
}

// Integer averages divide through float, double or a multiply-high
// (divide_by_count.inc): C's `x / n` for every 8-bit value, and for 32- and
// 64-bit values at the edges of the type, next to multiples of n (where a
// rounded quotient would cross a whole number) and near 2^24, 2^53 and
// 2^63, with divisors up to INT_MAX, on every ISA.
template <class T>
void CheckIntegerDivision(DataType type, const std::vector<int>& divisors, std::mt19937_64& rng) {
  constexpr auto kMin = std::numeric_limits<T>::min(), kMax = std::numeric_limits<T>::max();
  for (int n : divisors) {
    std::vector<T> x;
    if constexpr (sizeof(T) == 1) {
      for (int v = kMin; v <= kMax; ++v) x.push_back(static_cast<T>(v));
    } else {
      for (T v : {kMin, static_cast<T>(kMin + 1), T{-1}, T{0}, T{1}, static_cast<T>(kMax - 1), kMax}) x.push_back(v);
      std::vector<__int128> anchors = {int64_t{1} << 24, int64_t{1} << 31};
      if constexpr (sizeof(T) == 8) anchors.insert(anchors.end(), {__int128{1} << 53, __int128{1} << 62});
      for (int i = 0; i < 200; ++i) anchors.push_back(static_cast<__int128>(static_cast<T>(rng())));
      for (__int128 a : anchors) {
        // The multiples of n nearest a and -a, and their neighbours.
        for (__int128 base : {a - a % n, -a + a % n}) {
          for (int d = -1; d <= 1; ++d) {
            const __int128 v = base + d;
            if (v >= kMin && v <= kMax) x.push_back(static_cast<T>(v));
          }
        }
      }
    }
    std::vector<T> got = x;
    DivideByCount(got.data(), got.size(), type, n);
    for (size_t i = 0; i < x.size(); ++i) {
      const auto want = static_cast<T>(static_cast<long long>(x[i]) / n);
      if (got[i] != want) {
        FAIL() << DataTypeName(type) << " " << static_cast<long long>(x[i]) << " / " << n << " gave "
               << static_cast<long long>(got[i]) << ", want " << static_cast<long long>(want);
      }
    }
  }
}

TEST_F(KernelsTest, IntegerAveragesDivideExactlyForEveryDivisor) {
  const std::vector<int> divisors = {1,     2,      3,           5,         7,           10,
                                     127,   128,    129,         255,       256,         257,
                                     1000,  65535,  65537,       (1 << 24) - 1, 1 << 24, (1 << 24) + 1,
                                     1 << 30, 1234567891, std::numeric_limits<int>::max()};
  std::mt19937_64 rng(11);
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    CheckIntegerDivision<int8_t>(DataType::kInt8, divisors, rng);
    CheckIntegerDivision<uint8_t>(DataType::kUint8, divisors, rng);
    CheckIntegerDivision<int32_t>(DataType::kInt32, divisors, rng);
    CheckIntegerDivision<int64_t>(DataType::kInt64, divisors, rng);
    if (HasFatalFailure()) return;
  }
}

// ---------------------------------------------------------------------------
// CopyBytes.

TEST_F(KernelsTest, CopyBytesAllSizesAndAlignments) {
  std::mt19937_64 rng(5);
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    for (size_t bytes : {0, 1, 63, 64, 65, 16383, 16384, 16385, 100013, (1 << 20) + 7}) {
      for (bool nontemporal : {false, true}) {
        for (size_t dst_offset : {0, 1, 13}) {
          SCOPED_TRACE("bytes " + std::to_string(bytes) + " nt " + std::to_string(nontemporal) +
                       " offset " + std::to_string(dst_offset));
          Buffer src(1, bytes, (dst_offset * 7) % 64, false);
          Buffer dst(1, bytes, dst_offset, true);
          auto* s = static_cast<uint8_t*>(src.data());
          for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<uint8_t>(rng());
          CopyBytes(dst.data(), src.data(), bytes, nontemporal);
          EXPECT_EQ(std::memcmp(dst.data(), src.data(), bytes), 0);
          EXPECT_TRUE(dst.GuardsIntact());
        }
      }
    }
  }
}

// Both destinations with every store kind, at a's offset within a line
// and at others (where two streaming ones copy twice instead), on both
// sides of kMinCopyTwiceBytes and kMinNontemporalBytes, with each ISA.
TEST_F(KernelsTest, CopyBytesTwiceAllSizesAndAlignments) {
  std::mt19937_64 rng(6);
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    for (size_t bytes : {0, 1, 63, 129, 1023, 1024, 1025, 16383, 16384, 16385, 100013, (1 << 20) + 7}) {
      for (int stores = 0; stores < 4; ++stores) {
        const bool a_nt = (stores & 1) != 0;
        const bool b_nt = (stores & 2) != 0;
        for (const auto& [a_offset, b_offset] : {std::pair{0, 0}, {0, 16}, {13, 13}, {13, 1}, {48, 0}}) {
          SCOPED_TRACE("bytes " + std::to_string(bytes) + " nt " + std::to_string(a_nt) + std::to_string(b_nt) +
                       " offsets " + std::to_string(a_offset) + "," + std::to_string(b_offset));
          Buffer src(1, bytes, 16, false);
          Buffer a(1, bytes, a_offset, true);
          Buffer b(1, bytes, b_offset, true);
          auto* s = static_cast<uint8_t*>(src.data());
          for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<uint8_t>(rng());
          CopyBytesTwice(a.data(), a_nt, b.data(), b_nt, src.data(), bytes);
          EXPECT_EQ(std::memcmp(a.data(), src.data(), bytes), 0);
          EXPECT_EQ(std::memcmp(b.data(), src.data(), bytes), 0);
          EXPECT_TRUE(a.GuardsIntact());
          EXPECT_TRUE(b.GuardsIntact());
        }
      }
    }
  }
}

TEST_F(KernelsTest, CopyBytesTwiceFusesWhereTheLoopCanRun) {
  alignas(64) static uint8_t a[64 * 1024];
  alignas(64) static uint8_t b[64 * 1024 + 64];
  const size_t big = 32 * 1024;  // past kMinNontemporalBytes
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    SCOPED_TRACE(std::string("isa ") + isa);
    const bool vector = std::string(isa) != "generic";
    EXPECT_EQ(CopyBytesTwiceFuses(a, false, b + 16, false, big), vector);
    EXPECT_EQ(CopyBytesTwiceFuses(a, true, b + 16, false, big), vector);
    EXPECT_EQ(CopyBytesTwiceFuses(a, false, b + 16, true, big), vector);  // b streams: it goes first
    EXPECT_EQ(CopyBytesTwiceFuses(a, true, b + 64, true, big), vector);   // both stream, same offset
    EXPECT_FALSE(CopyBytesTwiceFuses(a, true, b + 16, true, big));        // both stream, offsets differ
    EXPECT_EQ(CopyBytesTwiceFuses(a, false, b, false, kMinCopyTwiceBytes), vector);
    EXPECT_FALSE(CopyBytesTwiceFuses(a, false, b, false, kMinCopyTwiceBytes - 1));
    // Under kMinNontemporalBytes neither streams, whatever was asked.
    EXPECT_EQ(CopyBytesTwiceFuses(a, true, b + 16, true, kMinNontemporalBytes - 1), vector);
  }
}

// Fills src[0, bytes) from `rng`, copies it to dst with CopyBytes (plain
// stores) and checks the copy and the guard bytes just outside it.
void ExpectGuardedCopy(uint8_t* dst, uint8_t* src, size_t bytes, std::mt19937_64& rng) {
  for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(rng());
  dst[-1] = 0xa5;
  dst[bytes] = 0x5a;
  CopyBytes(dst, src, bytes, /*nontemporal=*/false);
  EXPECT_EQ(std::memcmp(dst, src, bytes), 0);
  EXPECT_EQ(dst[-1], 0xa5);
  EXPECT_EQ(dst[bytes], 0x5a);
}

TEST(CopyAliasedTest, NamesDestinationsJustAfterTheSourceModuloFourKiB) {
  alignas(4096) static uint8_t page[3 * 4096];
  EXPECT_FALSE(CopyAliased(page, page));
  EXPECT_FALSE(CopyAliased(page + 4096, page));  // equal offsets: fast
  EXPECT_TRUE(CopyAliased(page + 1, page));
  EXPECT_TRUE(CopyAliased(page + 16, page));
  EXPECT_TRUE(CopyAliased(page + 4096 + 63, page));
  EXPECT_FALSE(CopyAliased(page + 64, page));
  EXPECT_FALSE(CopyAliased(page, page + 16));  // destination before the source
  EXPECT_TRUE(CopyAliased(page + 8192 + 16, page));  // 8208 bytes apart: 16 modulo 4 KiB
  for (const bool misaligned_rule : {false, true}) {
    EXPECT_FALSE(CopyAvoidsMemcpy(page + 16, page, kAliasedCopyMinBytes - 1, misaligned_rule));
    EXPECT_TRUE(CopyAvoidsMemcpy(page + 16, page, kAliasedCopyMinBytes, misaligned_rule));
    EXPECT_FALSE(CopyAvoidsMemcpy(page + 64, page, 8192, misaligned_rule));
  }
  EXPECT_FALSE(CopyAvoidsMemcpy(page + 16, page, kAliasedCopyMaxBytes, false));
}

// Copies between different offsets within a line take the vector loop from
// kMisalignedCopyMinBytes below kMisalignedCopyMaxBytes where the rule is on
// (SetMisalignedCopyRule: the Zen 4 switch table), whatever their distance
// modulo 4 KiB; co-aligned ones never do (but when aliased); the portable
// kernels never do.
TEST(CopyMisalignedTest, TakesTheVectorLoopOnlyWhereTheRuleIsOn) {
  alignas(4096) static uint8_t page[4096];
  EXPECT_FALSE(CopyMisaligned(page, page + 4096));
  EXPECT_FALSE(CopyMisaligned(page + 64, page));
  EXPECT_TRUE(CopyMisaligned(page + 16, page));
  EXPECT_TRUE(CopyMisaligned(page, page + 100));
  EXPECT_TRUE(CopyAvoidsMemcpy(page + 16, page, kAliasedCopyMaxBytes - 1, true));
  EXPECT_TRUE(CopyAvoidsMemcpy(page, page + 100, kMisalignedCopyMinBytes, true));
  EXPECT_TRUE(CopyAvoidsMemcpy(page, page + 100, kMisalignedCopyMaxBytes - 1, true));
  EXPECT_FALSE(CopyAvoidsMemcpy(page, page + 100, kMisalignedCopyMinBytes - 1, true));
  EXPECT_FALSE(CopyAvoidsMemcpy(page, page + 100, kMisalignedCopyMaxBytes, true));
  EXPECT_FALSE(CopyAvoidsMemcpy(page, page + 100, kMisalignedCopyMinBytes, false));
  EXPECT_FALSE(CopyAvoidsMemcpy(page + 4096, page, kMisalignedCopyMinBytes, true));

  EXPECT_FALSE(MisalignedCopyRuleActive());  // off until a communicator turns it on
  SetMisalignedCopyRule(true);
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    EXPECT_EQ(MisalignedCopyRuleActive(), std::string(isa) != "generic") << isa;
  }
  ASSERT_TRUE(ForceIsa("auto"));
  SetMisalignedCopyRule(false);
  EXPECT_FALSE(MisalignedCopyRuleActive());
}

// With the rule on, every ISA copies exactly at the rule's edges and at
// every offset within a line, guard bytes untouched.
TEST(CopyMisalignedTest, CopiesExactlyWithTheRuleOn) {
  std::mt19937_64 rng(11);
  SetMisalignedCopyRule(true);
  std::vector<uint8_t> src_arena(kMisalignedCopyMaxBytes + 256), dst_arena(kMisalignedCopyMaxBytes + 256);
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    for (size_t bytes : {kMisalignedCopyMinBytes - 1, kMisalignedCopyMinBytes, kMisalignedCopyMinBytes + 1,
                         size_t{(512 << 10) + 7}, kMisalignedCopyMaxBytes - 1, kMisalignedCopyMaxBytes}) {
      for (size_t src_offset : {0, 16, 63}) {
        for (size_t dst_offset : {1, 16, 47}) {
          SCOPED_TRACE(std::string("isa ") + isa + " bytes " + std::to_string(bytes) + " src+" +
                       std::to_string(src_offset) + " dst+" + std::to_string(dst_offset));
          const auto line = [](std::vector<uint8_t>& v) {
            return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
          };
          uint8_t* src = line(src_arena) + src_offset;
          uint8_t* dst = line(dst_arena) + 64 + dst_offset;
          ExpectGuardedCopy(dst, src, bytes, rng);
        }
      }
    }
  }
  ASSERT_TRUE(ForceIsa("auto"));
  SetMisalignedCopyRule(false);
}

// Aliased distances: exact copies and guards kept for every ISA and sizes
// around the thresholds and the loop's steps, heads and tails; from
// kAliasedCopyMinBytes below kAliasedCopyMaxBytes they take the vector loop.
TEST_F(KernelsTest, CopyBytesAliasedDistances) {
  std::mt19937_64 rng(11);
  std::vector<uint8_t> arena(2 * kAliasedCopyMaxBytes + 3 * 4096);
  const auto base = (reinterpret_cast<uintptr_t>(arena.data()) + 4095) & ~uintptr_t{4095};
  for (const char* isa : AvailableIsas()) {
    ASSERT_TRUE(ForceIsa(isa));
    for (size_t bytes : {kAliasedCopyMinBytes - 1, kAliasedCopyMinBytes, size_t{4096 + 7}, size_t{16384},
                         size_t{20000 + 33}, kAliasedCopyMaxBytes - 1, kAliasedCopyMaxBytes}) {
      for (size_t src_offset : {0, 5, 48}) {
        for (size_t distance : {1, 16, 31, 63}) {
          SCOPED_TRACE(std::string("isa ") + isa + " bytes " + std::to_string(bytes) + " src_offset " +
                       std::to_string(src_offset) + " distance " + std::to_string(distance));
          auto* src = reinterpret_cast<uint8_t*>(base + src_offset);
          // Far enough not to overlap, the same offset in its page plus `distance`.
          auto* dst = src + (bytes + 4095) / 4096 * 4096 + distance;
          ASSERT_LE(dst + bytes + 1, arena.data() + arena.size());
          ASSERT_TRUE(CopyAliased(dst, src));
          EXPECT_EQ(CopyAvoidsMemcpy(dst, src, bytes, /*misaligned_rule=*/false),
                    bytes >= kAliasedCopyMinBytes && bytes < kAliasedCopyMaxBytes);
          ExpectGuardedCopy(dst, src, bytes, rng);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Conversions.

TEST(HalfConversionTest, AllFloat16PatternsDecodeAndRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = HalfToFloat(h);
    const float want = RefHalfToFloat(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      // Quiet bit set, payload kept in the top mantissa bits (like VCVTPH2PS).
      const uint32_t expected_bits = (static_cast<uint32_t>(h & 0x8000) << 16) | 0x7FC00000u |
                                     (static_cast<uint32_t>(h & 0x3FF) << 13);
      ASSERT_EQ(BitsOf(f), expected_bits) << std::hex << b;
      ASSERT_EQ(FloatToHalf(f), h | 0x0200) << std::hex << b;  // quieted
    } else {
      ASSERT_EQ(BitsOf(f), BitsOf(want)) << std::hex << b;
      ASSERT_EQ(FloatToHalf(f), h) << std::hex << b;
    }
  }
}

TEST(HalfConversionTest, AllBFloat16PatternsDecodeAndRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = BFloat16ToFloat(h);
    ASSERT_EQ(BitsOf(f), BitsOf(RefBFloat16ToFloat(h))) << std::hex << b;
    const bool nan = (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0;
    ASSERT_EQ(FloatToBFloat16(f), nan ? (h | 0x0040) : h) << std::hex << b;
  }
}

// Rounding: every midpoint between neighbours (the ties), the floats just
// either side of it, and random bit patterns, against the table search.
void CheckNarrowing(uint16_t (*narrow)(float), float (*widen)(uint16_t), const Nearest16& ref,
                    uint16_t inf_bits) {
  auto check = [&](float f) {
    const uint16_t got = narrow(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(widen(got))) << f;
      return;
    }
    ASSERT_EQ(got, ref.Round(f)) << std::hexfloat << f;
  };
  for (uint32_t b = 0; b < inf_bits; ++b) {
    const double lo = widen(static_cast<uint16_t>(b));
    const double hi = b + 1 < inf_bits ? widen(static_cast<uint16_t>(b + 1)) : lo;
    const float mid = static_cast<float>((lo + hi) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
      check(f);
      check(-f);
    }
  }
  std::mt19937_64 rng(6);
  for (int i = 0; i < 200000; ++i) {
    const auto bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    check(f);
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, 1e30f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                  5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f}) {
    check(f);
    check(-f);
  }
}

TEST(HalfConversionTest, Float16RoundsToNearestEven) {
  CheckNarrowing(&FloatToHalf, &HalfToFloat, HalfRounder(), 0x7C00);
}

TEST(HalfConversionTest, BFloat16RoundsToNearestEven) {
  CheckNarrowing(&FloatToBFloat16, &BFloat16ToFloat, BFloat16Rounder(), 0x7F80);
}

// ---------------------------------------------------------------------------
// Dispatch.

TEST_F(KernelsTest, UnsupportedPairsHaveNoKernel) {
  for (DataType type :
       {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
      EXPECT_EQ(GetReduceFn(type, op), nullptr) << DataTypeName(type) << " " << ReduceOpName(op);
    }
  }
  EXPECT_EQ(GetReduceFn(static_cast<DataType>(8), ReduceOp::kSum), nullptr);
  EXPECT_EQ(GetReduceFn(static_cast<DataType>(200), ReduceOp::kSum), nullptr);
  EXPECT_EQ(GetReduceFn(DataType::kInt32, static_cast<ReduceOp>(8)), nullptr);
  for (DataType type : kAllTypes) {
    EXPECT_EQ(GetReduceFn(type, ReduceOp::kAvg), GetReduceFn(type, ReduceOp::kSum));
  }
}

TEST_F(KernelsTest, IsaSelection) {
  const std::vector<const char*> isas = AvailableIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_STREQ(isas.back(), "generic");
  EXPECT_STREQ(ActiveIsa(), isas.front());  // the best one by default
  EXPECT_FALSE(ForceIsa("sse9"));
  EXPECT_FALSE(ForceIsa(nullptr));
  EXPECT_STREQ(ActiveIsa(), isas.front());  // a refused switch changes nothing
  for (const char* isa : isas) {
    EXPECT_TRUE(ForceIsa(isa));
    EXPECT_STREQ(ActiveIsa(), isa);
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  EXPECT_EQ(ForceIsa("avx512"), avx512);
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  EXPECT_EQ(ForceIsa("avx2"), __builtin_cpu_supports("avx2") && f16c);
#endif
  std::printf("kernel ISAs on this CPU:");
  for (const char* isa : isas) std::printf(" %s", isa);
  std::printf("\n");
}

}  // namespace
}  // namespace choir::kernels
