// Reduction and copy kernels: the element-wise arithmetic every collective runs
// on its buffers (sum/prod/min/max/bitwise for each DataType, the final divide
// of avg, and bulk copies with optional non-temporal stores).
//
// Each kernel exists in three builds picked at run time: AVX-512 (F+BW+VL+DQ),
// AVX2 (+F16C) and portable C++. The best one the CPU supports is chosen on
// first use; ForceIsa() switches for tests and benchmarks. Buffers may have any
// alignment (element-aligned) and any length.
//
// Semantics that differ between libraries, stated once here:
//  * Integer sum/prod wrap around modulo 2^bits (two's complement).
//  * Float min/max propagate NaN like torch.minimum/maximum: if either input
//    is NaN the result is NaN. Between -0 and +0 (equal values) the second
//    operand wins, as with x86 MINPS/MAXPS, so the result is deterministic
//    for a given reduction order.
//  * float16/bfloat16 are widened to float32, combined, and rounded to
//    nearest-even once per output element (ReduceMany keeps the float32
//    accumulator over all k inputs).
//  * A NaN input gives a NaN output; its payload and quiet/signalling state
//    are not part of the contract (and may differ between ISAs).
//  * avg = sum, then DivideByCount once at the end; for float32 and float64
//    ReduceMany may divide before its stores instead (its `divisor`), with
//    the same values.
//
// Thread-safety: every kernel is a pure function of its arguments and may run
// concurrently on disjoint outputs. ForceIsa() swaps the dispatch table
// atomically; calls already running finish on the old table.
#ifndef CHOIR_KERNELS_REDUCE_H_
#define CHOIR_KERNELS_REDUCE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "choir/types.h"
#include "kernels/half.h"

namespace choir::kernels {

// dst[i] = a[i] op b[i] for i < count; dst may alias a or b (exactly, not partially).
using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);

// The function for (dtype, op); kAvg returns the sum kernel (division happens once
// at the end with DivideByCount). nullptr for an unsupported pair (bitwise on
// floats, values outside the enums). The pointer stays valid forever but keeps
// the ISA that was active when it was fetched.
ReduceFn GetReduceFn(DataType dtype, ReduceOp op);

// dst[i] = op over the k sources srcs[j][i], combined in order j = 0..k-1.
// float16/bfloat16 accumulate in float32 and round once at the end. dst may
// alias any source (exactly). `nontemporal` asks for streaming stores: use it when
// dst is large and not read again soon, so it does not evict useful cache lines.
// k >= 1 and (dtype, op) supported are preconditions (CHOIR_CHECK).
// With op kAvg and a `divisor` above 1 the sum is divided by it before it
// is stored, avg's two halves in one pass: the same values as the sum
// followed by DivideByCount(divisor) (a NaN's payload aside, which the
// contract above leaves open). Only where AverageFuses(dtype); every other
// call passes 1 (kAvg then gives the sum, divided apart).
void ReduceMany(void* dst, const void* const* srcs, int k, size_t count, DataType dtype,
                ReduceOp op, bool nontemporal = false, int divisor = 1);

// Whether ReduceMany and ReduceManyTwice divide an average before their
// stores for `dtype`: float32 and float64, whose sum is stored in its own
// type. float16 and bfloat16 round the sum before their division (dividing
// first would round once instead of twice, other bits), and integers
// divide apart.
bool AverageFuses(DataType dtype);

// data[i] = data[i] / n, the second half of avg. Integer types divide truncating
// toward zero like C; float16/bfloat16 divide in float32 and round once. n >= 1.
void DivideByCount(void* data, size_t count, DataType dtype, int n);

// memcpy, with non-temporal stores when `nontemporal` and the copy is at least
// kMinNontemporalBytes (below that the fence costs more than the cache saves),
// and with a vector loop instead of memcpy where memcpy would be slow
// (CopyAliased, CopyMisaligned: CopyAvoidsMemcpy). dst and src must not overlap.
inline constexpr size_t kMinNontemporalBytes = 16 * 1024;
void CopyBytes(void* dst, const void* src, size_t bytes, bool nontemporal);

// CopyBytes(a, src, bytes, a_nontemporal) and CopyBytes(b, src, bytes,
// b_nontemporal) in one pass over src, which is loaded once. Where
// CopyBytesTwiceFuses says no, it makes the two copies instead. a, b and
// src must not overlap.
inline constexpr size_t kMinCopyTwiceBytes = 1024;
void CopyBytesTwice(void* a, bool a_nontemporal, void* b, bool b_nontemporal, const void* src, size_t bytes);
// Whether CopyBytesTwice with these arguments makes one pass: not for
// copies under kMinCopyTwiceBytes, not with the portable kernels (which
// have no such loop), and not when both destinations stream but sit at
// different offsets within a 64-byte line (streaming stores need the
// alignment the loop gives its first destination only).
bool CopyBytesTwiceFuses(const void* a, bool a_nontemporal, const void* b, bool b_nontemporal, size_t bytes);

// ReduceMany(a, srcs, k, count, dtype, op, a_nontemporal) and
// ReduceMany(b, ...) with b_nontemporal, in one pass: each result vector is
// computed once and stored to both. Where ReduceManyTwiceFuses says no, it
// combines into one destination (the one without streaming stores, if
// either has none) and copies that into the other. Streaming stores only
// from kMinNontemporalBytes, as CopyBytes (ReduceMany streams at any
// size). a and b must not overlap each other; either may alias a source
// exactly (as ReduceMany's dst may), no other overlap.
// `divisor` as ReduceMany's.
void ReduceManyTwice(void* a, bool a_nontemporal, void* b, bool b_nontemporal, const void* const* srcs, int k,
                     size_t count, DataType dtype, ReduceOp op, int divisor = 1);
// Whether ReduceManyTwice with these arguments makes one pass: under the
// same rules as CopyBytesTwiceFuses (its bytes count * the element size).
// With a divisor above 1 it answers for k >= 2 sources (one source is a
// copy, then a division).
bool ReduceManyTwiceFuses(const void* a, bool a_nontemporal, const void* b, bool b_nontemporal, size_t count,
                          DataType dtype, ReduceOp op, int divisor = 1);

// True when dst lies 1 to 63 bytes after src modulo 4 KiB. A string copy
// (rep movsb, which glibc's memcpy uses for some sizes: measured slow here
// from 4 KiB to 256 KiB, not at 1 KiB or 1 MiB; the kernel uses it for every
// process_vm_readv/writev) between such addresses runs several to 40 times
// slower on AMD Zen 3 than between any others (measured: 16 KiB at
// 1.2-1.9 GB/s against 36-48, memcpy of 256 KiB at 1.9 against 29, 1 MiB
// unaffected; process_vm_readv of 256 KiB at 1.5 against 9.9;
// docs/performance-log.md, "Copies 4 KiB apart"). The window measured slow is
// 1-31 bytes; 63 leaves a margin.
inline bool CopyAliased(const void* dst, const void* src) {
  const auto distance = (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095;
  return distance != 0 && distance < 64;
}
// CopyBytes copies with a vector loop instead of memcpy when CopyAliased and
// the size lies in [kAliasedCopyMinBytes, kAliasedCopyMaxBytes): memcpy was
// measured unaffected at 1 MiB (27.9 GB/s at distance 16).
inline constexpr size_t kAliasedCopyMinBytes = 2048;
inline constexpr size_t kAliasedCopyMaxBytes = 1u << 20;

// True when dst and src lie at different offsets within a 64-byte line.
// On the AMD EPYC Zen 4 host the shared pipe's copies between such
// addresses (user buffers 16 bytes past a page, chunks on 64-byte lines;
// at most 512 KiB per copy there) ran faster with the vector loop than with
// memcpy (`rep movsb` at these sizes) in the host's slow spells, when lines
// cross between the cores slowly: the 2-rank pipe allreduce at 512 KiB-16
// MiB 4.6-6.1 against 2.2-2.5 GB/s of busbw (medians of 5 interleaved
// launches), the 1 MiB allgather 13.6 against 12.3; in a fast spell the two
// were within 0.90x-1.08x at every size and collective but one (broadcast
// 256 KiB 1.20x; 7 launches); alone, with the source in this core's cache,
// memcpy copied 48.3 GB/s at 512 KiB and the loop 48.2; in a later, mixed
// state the allreduce ran 0.61x-0.96x of memcpy's medians at 1-4 MiB, its
// slowest launches faster (docs/performance-log.md, "Copies between lines at
// different offsets"). So CopyBytes takes the
// vector loop for such copies in [kMisalignedCopyMinBytes,
// kMisalignedCopyMaxBytes) where SetMisalignedCopyRule turned the rule on:
// the communicators do, on hosts whose switch-point table is the Zen 4 one
// (comm/bootstrap.cc), the only CPU it was measured on; never with the
// portable kernels (a 16-byte loop, not measured against memcpy).
inline constexpr size_t kMisalignedCopyMinBytes = 64 * 1024;
inline constexpr size_t kMisalignedCopyMaxBytes = 1u << 20;
inline bool CopyMisaligned(const void* dst, const void* src) {
  return ((reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src)) & 63) != 0;
}
// Turns the rule on or off for the whole process (off at start).
void SetMisalignedCopyRule(bool on);
// Whether the rule is on and the active kernels are vector ones.
bool MisalignedCopyRuleActive();

// Whether CopyBytes copies `bytes` from src to dst with the vector loop when
// the misaligned-copy rule is `misaligned_rule` (MisalignedCopyRuleActive).
inline bool CopyAvoidsMemcpy(const void* dst, const void* src, size_t bytes, bool misaligned_rule) {
  if (bytes >= kAliasedCopyMinBytes && bytes < kAliasedCopyMaxBytes && CopyAliased(dst, src)) return true;
  return misaligned_rule && bytes >= kMisalignedCopyMinBytes && bytes < kMisalignedCopyMaxBytes &&
         CopyMisaligned(dst, src);
}

// HalfToFloat, FloatToHalf, BFloat16ToFloat and FloatToBFloat16 (scalar
// conversions, inline because the portable kernels call them per element) come
// from kernels/half.h, included above.

// "avx512", "avx2" or "generic": the kernel set in use.
const char* ActiveIsa();
// Switches the kernel set: "avx512", "avx2", "generic", or "auto" (the best this
// CPU supports). Returns false, changing nothing, for an unknown name or an ISA
// this CPU (or this build) lacks. For tests and benchmarks; production code
// leaves the automatic choice alone.
bool ForceIsa(const char* isa);
// The ISAs ForceIsa would accept on this CPU, best first (always ends with "generic").
std::vector<const char*> AvailableIsas();

}  // namespace choir::kernels

#endif  // CHOIR_KERNELS_REDUCE_H_
