#include "choir/types.h"

#include <string>

#include "base/strings.h"

namespace choir {

bool IsFloatingPoint(DataType type) {
  return type == DataType::kFloat16 || type == DataType::kBFloat16 ||
         type == DataType::kFloat32 || type == DataType::kFloat64;
}

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
  }
  return "invalid";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kBand: return "band";
    case ReduceOp::kBor: return "bor";
    case ReduceOp::kBxor: return "bxor";
  }
  return "invalid";
}

Result<DataType> ParseDataType(std::string_view name) {
  const std::string n = strings::ToLower(name);
  struct Alias {
    const char* name;
    DataType type;
  };
  static constexpr Alias kAliases[] = {
      {"int8", DataType::kInt8},       {"i8", DataType::kInt8},
      {"uint8", DataType::kUint8},     {"u8", DataType::kUint8},       {"byte", DataType::kUint8},
      {"int32", DataType::kInt32},     {"i32", DataType::kInt32},      {"int", DataType::kInt32},
      {"int64", DataType::kInt64},     {"i64", DataType::kInt64},      {"long", DataType::kInt64},
      {"float16", DataType::kFloat16}, {"fp16", DataType::kFloat16},   {"half", DataType::kFloat16},
      {"f16", DataType::kFloat16},     {"bfloat16", DataType::kBFloat16},
      {"bf16", DataType::kBFloat16},   {"float32", DataType::kFloat32}, {"fp32", DataType::kFloat32},
      {"f32", DataType::kFloat32},     {"float", DataType::kFloat32},  {"float64", DataType::kFloat64},
      {"fp64", DataType::kFloat64},    {"f64", DataType::kFloat64},    {"double", DataType::kFloat64},
  };
  for (const Alias& a : kAliases) {
    if (n == a.name) return a.type;
  }
  return InvalidArgument("unknown data type '" + std::string(name) +
                         "'; expected one of int8, uint8, int32, int64, float16, bfloat16, "
                         "float32, float64");
}

Result<ReduceOp> ParseReduceOp(std::string_view name) {
  const std::string n = strings::ToLower(name);
  for (int i = 0; i < kNumReduceOps; ++i) {
    const auto op = static_cast<ReduceOp>(i);
    if (n == ReduceOpName(op)) return op;
  }
  if (n == "product") return ReduceOp::kProd;
  if (n == "average" || n == "mean") return ReduceOp::kAvg;
  return InvalidArgument("unknown reduce op '" + std::string(name) +
                         "'; expected one of sum, prod, min, max, avg, band, bor, bxor");
}

Status CheckReduceSupported(DataType type, ReduceOp op) {
  if (DataTypeSize(type) == 0) {
    return Status(Code::kUnsupportedOp,
                  "data type value " + std::to_string(static_cast<int>(type)) + " is not a choir DataType");
  }
  if (static_cast<int>(op) >= kNumReduceOps) {
    return Status(Code::kUnsupportedOp,
                  "reduce op value " + std::to_string(static_cast<int>(op)) + " is not a choir ReduceOp");
  }
  const bool bitwise = op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
  if (bitwise && IsFloatingPoint(type)) {
    return Status(Code::kUnsupportedOp, std::string("reduce op ") + ReduceOpName(op) +
                                            " is bitwise and needs an integer type, got " +
                                            DataTypeName(type));
  }
  return Status::Ok();
}

}  // namespace choir
