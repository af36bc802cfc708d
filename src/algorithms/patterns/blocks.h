// Partitioning a buffer of `count` elements into `parts` contiguous blocks.
//
// Pure arithmetic, no I/O: the ring, scatter/gather and hierarchical
// algorithms all cut buffers with these helpers so that every rank computes
// the same boundaries.
//
// Thread-safety: pure functions.
#ifndef CHOIR_ALGORITHMS_PATTERNS_BLOCKS_H_
#define CHOIR_ALGORITHMS_PATTERNS_BLOCKS_H_

#include <cstddef>
#include <vector>

namespace choir::patterns {

struct Block {
  size_t offset = 0;  // in elements
  size_t count = 0;   // in elements
  friend bool operator==(const Block&, const Block&) = default;
};

// Block `index` of `parts` nearly equal blocks covering [0, count): the first
// count % parts blocks get one extra element. parts >= 1, 0 <= index < parts.
inline Block EvenBlock(size_t count, int parts, int index) {
  const size_t p = static_cast<size_t>(parts);
  const size_t i = static_cast<size_t>(index);
  const size_t base = count / p;
  const size_t extra = count % p;
  const size_t offset = i * base + (i < extra ? i : extra);
  return Block{offset, base + (i < extra ? 1 : 0)};
}

// Blocks given by explicit counts (the "v" variants): offsets are prefix sums.
inline std::vector<Block> BlocksFromCounts(const std::vector<size_t>& counts) {
  std::vector<Block> out;
  out.reserve(counts.size());
  size_t offset = 0;
  for (size_t c : counts) {
    out.push_back(Block{offset, c});
    offset += c;
  }
  return out;
}

}  // namespace choir::patterns

#endif  // CHOIR_ALGORITHMS_PATTERNS_BLOCKS_H_
