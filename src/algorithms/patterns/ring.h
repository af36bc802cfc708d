// Ring schedule: ranks 0..n-1 in a circle, each sends to its right neighbour
// and receives from its left one.
//
// Reduce-scatter runs n-1 steps; in step s rank r sends its partial sum of
// block (r - s - 1) mod n and receives block (r - s - 2) mod n, which it
// reduces into its own copy. After n-1 steps rank r owns the full reduction of
// block r. Allgather then circulates the finished blocks: in step s rank r
// sends block (r - s) mod n and receives block (r - s - 1) mod n.
//
// Thread-safety: pure functions.
#ifndef CHOIR_ALGORITHMS_PATTERNS_RING_H_
#define CHOIR_ALGORITHMS_PATTERNS_RING_H_

namespace choir::patterns {

struct Ring {
  int rank;
  int size;

  static int Mod(int a, int n) { return ((a % n) + n) % n; }
  int Right() const { return Mod(rank + 1, size); }
  int Left() const { return Mod(rank - 1, size); }
  int Steps() const { return size - 1; }

  // Reduce-scatter: block sent / received-and-reduced at step s (0-based).
  int ReduceScatterSendBlock(int step) const { return Mod(rank - step - 1, size); }
  int ReduceScatterRecvBlock(int step) const { return Mod(rank - step - 2, size); }
  // Allgather: block sent / received at step s; rank r starts owning block r.
  int AllgatherSendBlock(int step) const { return Mod(rank - step, size); }
  int AllgatherRecvBlock(int step) const { return Mod(rank - step - 1, size); }
};

}  // namespace choir::patterns

#endif  // CHOIR_ALGORITHMS_PATTERNS_RING_H_
