// Internal to src/kernels: the table of kernels one instruction set provides,
// and the per-ISA tables (isa_generic.cc, isa_avx2.cc, isa_avx512.cc). reduce.cc
// picks one at run time; a null entry in a SIMD table falls back to the
// portable kernel.
//
// Thread-safety: the tables are constants.
#ifndef CHOIR_KERNELS_ISA_H_
#define CHOIR_KERNELS_ISA_H_

#include <cstddef>

#include "choir/types.h"
#include "kernels/reduce.h"

// The SIMD files are compiled only where their intrinsics exist.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CHOIR_KERNELS_X86 1
#else
#define CHOIR_KERNELS_X86 0
#endif

namespace choir::kernels {

// dst[i] = op over srcs[0..k)[i]; see ReduceMany.
using ManyFn = void (*)(void* dst, const void* const* srcs, int k, size_t count, bool nontemporal);
// ManyFn's result stored to a and to b in one pass (ReduceManyTwice):
// `streams` 0 (plain stores), 1 (a streams) or 2 (both stream; b at a's
// offset within a line).
using ManyTwiceFn = void (*)(void* a, void* b, const void* const* srcs, int k, size_t count, int streams);
// ManyFn's sum divided by `divisor` before it is stored, and
// ManyTwiceFn's likewise (avg in one pass: ReduceMany's `divisor`).
using ManyAvgFn = void (*)(void* dst, const void* const* srcs, int k, size_t count, bool nontemporal, int divisor);
using ManyTwiceAvgFn = void (*)(void* a, void* b, const void* const* srcs, int k, size_t count, int streams,
                                int divisor);
// data[i] /= n.
using DivideFn = void (*)(void* data, size_t count, int n);
// memcpy with streaming stores (copy_nontemporal) or with plain vector
// stores (copy); no size threshold.
using CopyFn = void (*)(void* dst, const void* src, size_t bytes);
// The copy of src to two destinations (CopyBytesTwice); no size threshold.
using CopyTwiceFn = void (*)(void* a, void* b, const void* src, size_t bytes);

struct IsaTable {
  const char* name;
  // Indexed by DataType and ReduceOp; kAvg slots stay null (callers map avg to
  // sum), as do bitwise ops on floating-point types.
  ReduceFn reduce[kNumDataTypes][kNumReduceOps];
  ManyFn many[kNumDataTypes][kNumReduceOps];
  // Null in the portable table and for pairs a SIMD file lacks
  // (ReduceManyTwice then reduces and copies).
  ManyTwiceFn many_twice[kNumDataTypes][kNumReduceOps];
  // float32 and float64 only (AverageFuses); many_twice_avg null in the
  // portable table.
  ManyAvgFn many_avg[kNumDataTypes];
  ManyTwiceAvgFn many_twice_avg[kNumDataTypes];
  DivideFn divide[kNumDataTypes];
  CopyFn copy_nontemporal;
  CopyFn copy;
  // src to a and to b in one pass, indexed [a streams][b streams]; null
  // where the ISA has none (CopyBytesTwice then copies twice).
  CopyTwiceFn copy_twice[2][2];
};

// Complete: every supported (dtype, op) is filled.
const IsaTable& GenericTable();
// nullptr when this build has no such kernels (not x86-64). Callers must check
// the CPU first: these kernels fault on a CPU without the instructions.
// AVX2 needs AVX2 + F16C; AVX-512 needs F, BW, VL and DQ as well.
const IsaTable* Avx2Table();
const IsaTable* Avx512Table();

}  // namespace choir::kernels

#endif  // CHOIR_KERNELS_ISA_H_
