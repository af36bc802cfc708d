// A 64-bit mixing function shared by the hashes of names and signatures.
//
// Thread-safety: pure functions.
#ifndef CHOIR_BASE_HASH_H_
#define CHOIR_BASE_HASH_H_

#include <cstdint>

namespace choir {

// The final mixer of SplitMix64: every input bit reaches every output bit,
// so equal-looking inputs (counters, packed fields) give unrelated outputs.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace choir

#endif  // CHOIR_BASE_HASH_H_
