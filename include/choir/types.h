// Element types and reduction operations understood by every collective.
//
// float16 and bfloat16 are stored as 16-bit IEEE half / brain-float values and
// reduced by converting to float32, combining, and rounding back once per
// combining step.
//
// Thread-safety: constant data and pure functions.
#ifndef CHOIR_TYPES_H_
#define CHOIR_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "choir/status.h"

namespace choir {

enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
};
inline constexpr int kNumDataTypes = 8;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  kAvg = 4,   // sum divided by the number of ranks (integer types: truncating division)
  kBand = 5,  // bitwise, integer types only
  kBor = 6,
  kBxor = 7,
};
inline constexpr int kNumReduceOps = 8;

// Bytes per element; 0 for a value outside the enum. Inline: every call
// asks it several times on its way (the small-message path counts them).
constexpr size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kInt8:
    case DataType::kUint8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}
bool IsFloatingPoint(DataType type);
// "float32", "bfloat16", ...; "invalid" for values outside the enum.
const char* DataTypeName(DataType type);
const char* ReduceOpName(ReduceOp op);
// Accepts the names above plus common aliases (f32, fp16, bf16, int, float, double...).
Result<DataType> ParseDataType(std::string_view name);
Result<ReduceOp> ParseReduceOp(std::string_view name);

// OK when `op` is defined for `type` (bitwise ops need an integer type), otherwise
// an UnsupportedOp or InvalidArgument error naming both.
Status CheckReduceSupported(DataType type, ReduceOp op);

}  // namespace choir

#endif  // CHOIR_TYPES_H_
