// TEMPORARY scalar stand-in until the vectorized kernels land (same interface).
#ifndef CHOIR_KERNELS_REDUCE_H_
#define CHOIR_KERNELS_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "choir/types.h"

namespace choir::kernels {
using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);
ReduceFn GetReduceFn(DataType dtype, ReduceOp op);
void ReduceMany(void* dst, const void* const* srcs, int k, size_t count, DataType dtype,
                ReduceOp op, bool nontemporal = false);
void DivideByCount(void* data, size_t count, DataType dtype, int n);
void CopyBytes(void* dst, const void* src, size_t bytes, bool nontemporal);
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);
const char* ActiveIsa();
bool ForceIsa(const char* isa);
}  // namespace choir::kernels

#endif  // CHOIR_KERNELS_REDUCE_H_
