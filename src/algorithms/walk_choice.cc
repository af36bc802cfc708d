#include "algorithms/walk_choice.h"

#include <algorithm>
#include <bit>

namespace choir::algorithms {

double WalkChooser::Times::Median() const {
  if (kept < last.size()) return kept == 0 ? 0 : (last[0] + last[kept - 1]) / 2;  // one or two times
  std::array<double, 3> v = last;
  std::sort(v.begin(), v.end());
  return v[1];
}

WalkChooser::Entry& WalkChooser::At(CollKind kind, size_t bytes) {
  size_t k = kKinds - 1;
  if (kind == CollKind::kAllgather || kind == CollKind::kAllgatherV) k = 0;
  if (kind == CollKind::kAlltoall) k = 1;
  return entries_[k][static_cast<size_t>(std::bit_width(bytes))];
}

std::vector<uint64_t> WalkChooser::Table(CollKind kind, size_t bytes, bool adapt) {
  const Entry& e = At(kind, bytes);
  return {adapt ? 1u : 0u, std::bit_cast<uint64_t>(e.walks[0].Median()), std::bit_cast<uint64_t>(e.walks[1].Median())};
}

WalkChooser::Walk WalkChooser::Choose(CollKind kind, size_t bytes, const std::vector<std::vector<uint64_t>>& tables) {
  Entry& e = At(kind, bytes);
  const uint64_t call = e.calls++;
  e.trying = false;
  // The slowest rank's figure per walk; a walk some rank has not measured
  // yet counts as unknown.
  std::array<double, 2> slowest{};
  std::array<bool, 2> known{true, true};
  for (const std::vector<uint64_t>& t : tables) {
    if (t.size() < kTableWords || t[0] == 0) return Walk::kPipe;  // a rank does not adapt
    for (size_t w = 0; w < 2; ++w) {
      const double v = std::bit_cast<double>(t[w + 1]);
      known[w] = known[w] && v > 0;
      slowest[w] = std::max(slowest[w], v);
    }
  }
  const bool kernel_ahead = known[0] && known[1] && slowest[1] < kKernelMargin * slowest[0];
  const Walk best = kernel_ahead ? Walk::kKernel : Walk::kPipe;
  const Walk other = kernel_ahead ? Walk::kPipe : Walk::kKernel;
  const bool far_behind = known[0] && known[1] &&
                          slowest[static_cast<size_t>(other)] >= 2 * slowest[static_cast<size_t>(best)];
  const uint64_t period = far_behind ? kRareExplorePeriod : kExplorePeriod;
  // Every input here was exchanged, so the reference is the same on every rank.
  // The walk in use getting faster needs no try (it only gains), but sets
  // the base a later slowdown is measured from.
  const double in_use = known[static_cast<size_t>(best)] ? slowest[static_cast<size_t>(best)] : 0;
  if (best != e.ref_walk || e.ref_value <= 0 || in_use < e.ref_value) {
    e.ref_walk = best;
    e.ref_value = in_use;
  }
  const bool slowed = e.ref_value > 0 && in_use > kChange * e.ref_value;
  e.trying = call % period == period / 2 || slowed;
  if (e.trying) e.ref_value = in_use;
  return e.trying ? other : best;
}

void WalkChooser::Record(CollKind kind, size_t bytes, Walk walk, int64_t nanos) {
  if (bytes == 0 || nanos <= 0) return;
  Entry& e = At(kind, bytes);
  Times& t = e.walks[static_cast<size_t>(walk)];
  if (!t.warm) {  // cold: first touches
    t.warm = true;
    return;
  }
  const double now = static_cast<double>(nanos) / static_cast<double>(bytes);
  if (e.trying) {
    t.last.fill(now);  // a try speaks for its walk alone
    t.kept = t.last.size();
  } else {
    t.last[t.next] = now;
    t.kept = std::min(t.kept + 1, t.last.size());
  }
  t.next = (t.next + 1) % t.last.size();
}

}  // namespace choir::algorithms
