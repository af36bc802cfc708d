// Building a Topology from rank places: grouping ranks into hosts by host
// name and into groups inside a host by package (or NUMA node), the way the
// communicator will from the places every rank detects, and the way
// SyntheticTopology and `choir topo` do for a job shape.
//
// Thread-safety: pure functions.
#ifndef CHOIR_TOPOLOGY_BUILD_H_
#define CHOIR_TOPOLOGY_BUILD_H_

#include <string>
#include <vector>

#include "choir/topology.h"
#include "topology/machine.h"

namespace choir::topology {

// Largest world a topology (file or job shape) may describe; keeps a typo
// such as rank 2000000000 from allocating gigabytes.
inline constexpr int kMaxWorldSize = 1 << 20;

// A Topology of `places` (indexed by rank; `host` set in each): hosts in
// order of their lowest rank, groups from AddGroupsFromPlaces, default links.
Topology AssembleTopology(std::vector<RankPlace> places, std::string source);

// Splits each host's ranks into groups by package when they span several
// packages, else by NUMA node when they span several, else leaves the host
// ungrouped. A host with a rank of unknown place stays ungrouped: a guess
// would put the slow link inside a group.
void AddGroupsFromPlaces(Topology& topology);

// A job of host_names.size() hosts with `ranks_per_host` ranks each, rank
// numbers host-major (host h holds h*n .. h*n+n-1, as `choir run` numbers
// them) or round-robin over hosts when `interleave`. Every host is `machine`
// (nullptr: places unknown). Empty topology (world 0) for a shape out of range.
Topology JobTopology(const std::vector<std::string>& host_names, int ranks_per_host,
                     bool interleave, const MachineLayout* machine, std::string source);

// "0-3,8-11" for {0,1,2,3,8,9,10,11}; "0,2,4" for {0,2,4}. Input ascending.
std::string FormatRankList(const std::vector<int>& ranks);

}  // namespace choir::topology

#endif  // CHOIR_TOPOLOGY_BUILD_H_
