// What algorithm selection knows about the group an operation runs on: its
// size, whether it is one host's ranks (shared area, single copy), its host
// layout when it spans hosts, and the link costs the cost model uses.
// Built from a live Context, or from a Topology for `choir topo`.
//
// Thread-safety: plain data.
#ifndef CHOIR_ALGORITHMS_GROUP_VIEW_H_
#define CHOIR_ALGORITHMS_GROUP_VIEW_H_

#include <cstddef>
#include <string>

#include "algorithms/layout.h"
#include "algorithms/switch_points.h"
#include "choir/topology.h"

namespace choir::algorithms {

struct LinkCost {
  double latency_s = 1e-6;       // per message
  double bandwidth_bps = 10e9;   // bytes per second, one direction
};

// The cost of link class `name` ("intra_host", "inter_host") of `topology`,
// or `fallback` when the topology does not give it (defined in plan.cc).
LinkCost LinkCostOf(const Topology& topology, const std::string& name, LinkCost fallback);


struct GroupView {
  int size = 1;
  bool same_host = false;     // exactly this host's local group: shared slots usable
  bool cma = false;           // and single-copy reads allowed
  bool shares_cpus = false;   // and its ranks outnumber the CPUs they run on
  size_t slot_bytes = 0;      // shared slot payload
  size_t pipe_bytes = 0;      // shared pipe per rank (shm_pipe)
  size_t pipe_cache_bytes = 0;  // L2 bytes bounding the pipe's chunks, agreed by the host's ranks
  SwitchTable switch_table = SwitchTable::kIntel;  // which measured switch points apply
  const Layout* layout = nullptr;  // host layout when the group is the whole communicator
  LinkCost intra_host{1e-6, 10e9};
  LinkCost inter_host{20e-6, 3e9};  // a host's network link, shared by its ranks

  int hosts() const { return layout ? layout->num_hosts() : 1; }
  bool multi_host() const { return layout != nullptr && layout->num_hosts() > 1; }
};

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_GROUP_VIEW_H_
