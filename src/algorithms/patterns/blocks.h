// Partitioning a buffer of `count` elements into `parts` contiguous blocks.
//
// Pure arithmetic, no I/O: the ring, scatter/gather and hierarchical
// algorithms all cut buffers with these helpers so that every rank computes
// the same boundaries.
//
// Thread-safety: pure functions.
#ifndef CHOIR_ALGORITHMS_PATTERNS_BLOCKS_H_
#define CHOIR_ALGORITHMS_PATTERNS_BLOCKS_H_

#include <algorithm>
#include <cassert>
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

// `parts` contiguous blocks covering [0, count) where block `heavy` gets
// `weight` times the share of each other block (weight clamped to
// [1, 1e6]), rounded down to a multiple of `align` elements; the others
// split the rest as EvenBlock does. parts >= 1, 0 <= heavy < parts,
// align >= 1.
inline std::vector<Block> WeightedBlocks(size_t count, int parts, int heavy, double weight, size_t align) {
  assert(parts >= 1 && heavy >= 0 && heavy < parts && align >= 1);
  if (parts == 1) return {Block{0, count}};
  const double w = weight >= 1.0 ? (weight <= 1e6 ? weight : 1e6) : 1.0;  // NaN -> 1
  const double share = w / (w + static_cast<double>(parts - 1));
  const double want = static_cast<double>(count) * share;
  size_t big = want >= static_cast<double>(count) ? count : static_cast<size_t>(want);
  big = big / align * align;
  std::vector<Block> out;
  size_t offset = 0;
  for (int p = 0, j = 0; p < parts; ++p) {
    const size_t n = p == heavy ? big : EvenBlock(count - big, parts - 1, j++).count;
    out.push_back(Block{offset, n});
    offset += n;
  }
  return out;
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

// Elements from the start of the buffer to the end of the last of `blocks`.
inline size_t ElemsSpanned(const std::vector<Block>& blocks) {
  size_t elems = 0;
  for (const Block& b : blocks) elems = std::max(elems, b.offset + b.count);
  return elems;
}

}  // namespace choir::patterns

#endif  // CHOIR_ALGORITHMS_PATTERNS_BLOCKS_H_
