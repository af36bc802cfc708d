#include "algorithms/walk_choice.h"

#include <algorithm>
#include <bit>

namespace choir::algorithms {

void RecentTimes::Add(double v) {
  last[next] = v;
  kept = std::min(kept + 1, last.size());
  next = (next + 1) % last.size();
}

void RecentTimes::Reset(double v) {
  last.fill(v);
  kept = last.size();
  next = 0;
}

double RecentTimes::Least() const {
  return kept == 0 ? 0 : *std::min_element(last.begin(), last.begin() + kept);
}

double RecentTimes::Median() const {
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
    t.Reset(now);
  } else {
    t.Add(now);
  }
}

size_t StagingChooser::KindIndex(CollKind kind) {
  size_t k = 0;  // allreduce, and anything else
  if (kind == CollKind::kReduce) k = 1;
  if (kind == CollKind::kReduceScatter) k = 2;
  if (kind == CollKind::kAllgather || kind == CollKind::kAllgatherV) k = 3;
  if (kind == CollKind::kAlltoall) k = 4;
  return k;
}

StagingChooser::Entry& StagingChooser::At(CollKind kind, size_t bytes) {
  return entries_[KindIndex(kind)][static_cast<size_t>(std::bit_width(bytes))];
}

namespace {

StagingChooser::Stores OtherKind(StagingChooser::Stores s) {
  using Stores = StagingChooser::Stores;
  return s == Stores::kPlain ? Stores::kStreaming : Stores::kPlain;
}

}  // namespace

StagingChooser::Stores StagingChooser::StartTry(Entry& e, uint64_t calls) {
  e.try_left = calls - 1;
  e.fresh = true;
  e.try_start = e.calls - 1;  // Choose counted this call already
  return OtherKind(e.in_use);
}

StagingChooser::Stores StagingChooser::Choose(CollKind kind, size_t bytes, Stores home) {
  const size_t k = KindIndex(kind);
  const size_t cls = static_cast<size_t>(std::bit_width(bytes));
  Entry& e = entries_[k][cls];
  const uint64_t call = e.calls++;
  if (call == 0) {
    e.in_use = decided_ ? preferred_ : home;
    // The nearest smaller size of this collective that ran (if it uses the
    // same kind) sets the reference: a size that runs kChange times slower
    // per byte is tried with the other kind (a spell that began since).
    for (size_t c = cls; c-- > 0 && cls - c <= kNeighbourClasses;) {
      const Entry& n = entries_[k][c];
      if (n.calls == 0) continue;
      if (n.in_use == e.in_use) {
        e.ref = n.kinds[static_cast<size_t>(n.in_use)].Least();
        e.neighbour_ref = e.ref > 0;
      }
      break;
    }
  }
  if (e.try_left > 0) {  // the rest of a try
    --e.try_left;
    return OtherKind(e.in_use);
  }
  const double use = e.kinds[static_cast<size_t>(e.in_use)].Least();
  const double alt = e.kinds[static_cast<size_t>(OtherKind(e.in_use))].Least();
  if (use <= 0) {
    // A class that starts before any class decided (nothing to go by)
    // measures the other kind first (calls 1-2), then the kind in use
    // (3-4): a launch's first calls are warm-up more than measurement, and
    // so the other kind costs it no call after the warm-up if it is the
    // slower.
    if (!decided_ && call == 1 && alt <= 0) return StartTry(e, 2);
    return e.in_use;  // its first counted call still to come
  }
  double in_use = use;
  if (alt > 0) {
    // The kind in use is left only on two of its figures: a class's first
    // counted call can be one slow call (a peer still busy with its first
    // touches: 3.5 ns per byte against 0.2 in a 1 MiB allreduce).
    const double margin = e.in_use == home ? kAwayMargin : kHomeMargin;
    const bool measured = e.kinds[static_cast<size_t>(e.in_use)].kept >= 2;
    if (measured && e.judge) {  // the first decision after a try that gave a figure
      e.judge = false;
      if (alt >= kLeadMargin * use) {
        e.leads = 0;
      } else if (e.leads == 0 || e.try_start >= e.lead_start + kLeadSpacing) {
        ++e.leads;
        e.lead_start = e.try_start;
      }
    }
    if (measured && (alt < margin * use || (e.leads >= kLeadTries && alt < kLeadMargin * use))) {
      e.in_use = OtherKind(e.in_use);
      in_use = alt;
      e.ref = alt;
      e.leads = 0;
    }
    preferred_ = e.in_use;
    decided_ = true;
  }
  // A size faster per byte than the smaller one is the usual case (less
  // work per call), no change: only a slower one counts.
  if (e.ref <= 0 || (e.neighbour_ref && in_use < e.ref)) e.ref = in_use;
  e.neighbour_ref = false;
  const bool far_behind = alt > 0 && std::max(use, alt) >= 2 * std::min(use, alt);
  const uint64_t period = far_behind ? kRareExplorePeriod : kExplorePeriod;
  // The kind in use got kChange times slower or faster since the other was
  // last measured (or than the smaller size): a spell started or ended,
  // and the other's figure is stale.
  const bool changed = in_use > kChange * e.ref || kChange * in_use < e.ref;
  // A try that led is confirmed by one kLeadSpacing calls after it, unless
  // a try has begun that late already (one begun sooner does not count,
  // nor put this one off): a steady lead found in calls 1-2 of a
  // communicator's first class takes over at call 20, not after the
  // periodic tries at 32 and 96. Only the home kind meets this rule: with
  // the other kind in use, any lead is below kHomeMargin and takes over at
  // once.
  const bool confirm =
      e.leads == 1 && call >= e.lead_start + kLeadSpacing && e.try_start < e.lead_start + kLeadSpacing;
  if (call % period == period / 2 || changed || confirm) {
    e.ref = in_use;
    return StartTry(e, kTryCalls);
  }
  return e.in_use;
}

void StagingChooser::Record(CollKind kind, size_t bytes, Stores stores, int64_t nanos) {
  if (bytes == 0 || nanos <= 0) return;
  Entry& e = At(kind, bytes);
  // The class's first call (first touches) and a call after one of the
  // other kind (the caches still hold what that left) are not counted.
  const bool settled = e.last == static_cast<int>(stores);
  e.last = static_cast<int>(stores);
  if (!settled) return;
  const double now = static_cast<double>(nanos) / static_cast<double>(bytes);
  RecentTimes& t = e.kinds[static_cast<size_t>(stores)];
  if (stores != e.in_use && e.fresh) {
    t.Reset(now);  // a try speaks for its kind alone
    e.fresh = false;
    e.judge = true;
  } else {
    t.Add(now);
  }
}

}  // namespace choir::algorithms
