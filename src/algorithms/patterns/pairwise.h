// Pairwise exchange for alltoall: in step s = 1..n-1 rank r sends its block
// for (r + s) mod n and receives the block from (r - s) mod n, so every pair
// meets exactly once and each step is a permutation (no rank receives twice).
//
// Dissemination (barrier): in round k rank r signals (r + 2^k) mod n and waits
// for (r - 2^k) mod n; after ceil(log2 n) rounds every rank has transitively
// heard from every other.
//
// Thread-safety: pure functions.
#ifndef CHOIR_ALGORITHMS_PATTERNS_PAIRWISE_H_
#define CHOIR_ALGORITHMS_PATTERNS_PAIRWISE_H_

namespace choir::patterns {

struct Pairwise {
  int rank;
  int size;
  int Steps() const { return size - 1; }
  int SendTo(int step) const { return (rank + step) % size; }
  int RecvFrom(int step) const { return ((rank - step) % size + size) % size; }
};

struct Dissemination {
  int rank;
  int size;
  int Rounds() const {
    int r = 0;
    for (int d = 1; d < size; d *= 2) ++r;
    return r;
  }
  int SendTo(int round) const { return (rank + (1 << round)) % size; }
  int RecvFrom(int round) const { return ((rank - (1 << round)) % size + size) % size; }
};

}  // namespace choir::patterns

#endif  // CHOIR_ALGORITHMS_PATTERNS_PAIRWISE_H_
