// The cost model: predicted seconds of an algorithm on a group that spans
// hosts, from the latency and bandwidth of each level (GroupView) and the
// host layout. A host's network link is shared by all its ranks' concurrent
// streams, which is what makes a ring that crosses hosts on every hop slow.
//
// The numbers need not be accurate, only rank the candidates correctly:
// `choir topo` prints them next to the choice they made.
#include <algorithm>
#include <cmath>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/recursive_doubling.h"

namespace choir::algorithms {
namespace {

double Bytes(const GroupView& g, const OpArgs& a) { return static_cast<double>(a.SelectionBytes(g.size)); }

// Time of one ring step moving `chunk` bytes from every rank to its right
// neighbour: the slowest hop decides, and hops leaving a host share its link.
double RingStep(const GroupView& g, double chunk) {
  const Layout& l = *g.layout;
  const int n = l.world();
  std::vector<int> leaving(static_cast<size_t>(l.num_hosts()), 0);
  for (int r = 0; r < n; ++r) {
    const int h = l.host_of[static_cast<size_t>(r)];
    if (h != l.host_of[static_cast<size_t>((r + 1) % n)]) ++leaving[static_cast<size_t>(h)];
  }
  double worst = 0;
  for (int r = 0; r < n; ++r) {
    const int h = l.host_of[static_cast<size_t>(r)];
    const bool inter = h != l.host_of[static_cast<size_t>((r + 1) % n)];
    const double t = inter ? g.inter_host.latency_s + chunk * leaving[static_cast<size_t>(h)] / g.inter_host.bandwidth_bps
                           : g.intra_host.latency_s + chunk / g.intra_host.bandwidth_bps;
    worst = std::max(worst, t);
  }
  return worst;
}

// Time of one exchange round where rank r talks to partner(r), `bytes` each way.
template <typename Partner>
double ExchangeRound(const GroupView& g, double bytes, Partner partner) {
  const Layout& l = *g.layout;
  std::vector<int> leaving(static_cast<size_t>(l.num_hosts()), 0);
  bool any_inter = false;
  for (int r = 0; r < l.world(); ++r) {
    const int p = partner(r);
    if (p < 0) continue;
    if (l.host_of[static_cast<size_t>(r)] != l.host_of[static_cast<size_t>(p)]) {
      ++leaving[static_cast<size_t>(l.host_of[static_cast<size_t>(r)])];
      any_inter = true;
    }
  }
  const int busiest = *std::max_element(leaving.begin(), leaving.end());
  const double intra = g.intra_host.latency_s + bytes / g.intra_host.bandwidth_bps;
  if (!any_inter) return intra;
  return std::max(intra, g.inter_host.latency_s + bytes * busiest / g.inter_host.bandwidth_bps);
}

int Log2Ceil(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

int MaxLocal(const Layout& l) {
  size_t m = 0;
  for (const auto& h : l.hosts) m = std::max(m, h.size());
  return static_cast<int>(m);
}

// Shared-memory cost of moving `bytes` through one host (single copy).
double IntraCopy(const GroupView& g, double bytes) {
  return g.intra_host.latency_s + bytes / g.intra_host.bandwidth_bps;
}

}  // namespace

double PredictRingAllreduce(const GroupView& g, const OpArgs& a) {
  const int n = g.size;
  return 2.0 * (n - 1) * RingStep(g, Bytes(g, a) / n);
}

double PredictRingCollective(const GroupView& g, const OpArgs& a) {  // reduce_scatter, allgather
  const int n = g.size;
  return (n - 1) * RingStep(g, Bytes(g, a) / n);
}

double PredictRecursiveDoubling(const GroupView& g, const OpArgs& a) {
  const int n = g.size;
  const double bytes = Bytes(g, a);
  const patterns::RecursiveDoubling rd0{0, n};
  double t = 0;
  if (rd0.NumExtra() > 0) {
    t += 2 * ExchangeRound(g, bytes, [&](int r) { return patterns::RecursiveDoubling{r, n}.ExtraPartner(); });
  }
  for (int k = 0; k < rd0.Rounds(); ++k) {
    t += ExchangeRound(g, bytes, [&](int r) {
      const patterns::RecursiveDoubling rd{r, n};
      return rd.IsExtra() ? -1 : rd.Partner(k);
    });
  }
  return t;
}

double PredictBinomial(const GroupView& g, const OpArgs& a) {
  const double bytes = Bytes(g, a);
  return Log2Ceil(g.size) * std::max(IntraCopy(g, bytes), g.inter_host.latency_s + bytes / g.inter_host.bandwidth_bps);
}

double PredictHierAllreduce(const GroupView& g, const OpArgs& a) {
  const Layout& l = *g.layout;
  const double n_bytes = Bytes(g, a);
  const int local = MaxLocal(l);
  const int hosts = l.num_hosts();
  const double intra = 2 * IntraCopy(g, n_bytes * (local - 1) / local);
  // Every rail moves its slice around the hosts; a host's rails share its link.
  const double inter = 2.0 * (hosts - 1) * (g.inter_host.latency_s + n_bytes / hosts / g.inter_host.bandwidth_bps);
  return intra + inter;
}

double PredictHierGather(const GroupView& g, const OpArgs& a) {  // reduce_scatter, allgather
  const Layout& l = *g.layout;
  const double n_bytes = Bytes(g, a);
  const int local = MaxLocal(l);
  const int hosts = l.num_hosts();
  const double permute = IntraCopy(g, n_bytes);
  const double intra = IntraCopy(g, n_bytes * (local - 1) / local);
  const double inter = (hosts - 1) * (g.inter_host.latency_s + n_bytes / hosts / g.inter_host.bandwidth_bps);
  return permute + intra + inter;
}

double PredictHierBroadcast(const GroupView& g, const OpArgs& a) {
  const Layout& l = *g.layout;
  const double n_bytes = Bytes(g, a);
  const int local = MaxLocal(l);
  return IntraCopy(g, n_bytes) +
         Log2Ceil(l.num_hosts()) * (g.inter_host.latency_s + n_bytes / g.inter_host.bandwidth_bps) +
         IntraCopy(g, n_bytes * (local - 1) / local);
}

}  // namespace choir::algorithms
