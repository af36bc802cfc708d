// Where ranks run, how fast the links between them are, and what choir does
// about it.
//
// A Topology lists hosts, the ranks on each host, optional groups inside a
// host (sockets, NUMA nodes), each rank's CPU place and network interface,
// and link classes with bandwidth and latency. It comes from detection
// (hwloc on each rank, exchanged at communicator creation) or from a
// topology file (CHOIR_TOPO_FILE, the role of Ascend's rank table), which
// replaces detection entirely. docs/topology.md documents the file format.
//
// Thread-safety: plain values; the functions are thread-safe.
#ifndef CHOIR_TOPOLOGY_H_
#define CHOIR_TOPOLOGY_H_

#include <string>
#include <vector>

#include "choir/status.h"

namespace choir {

inline constexpr int kTopologyFileVersion = 1;

struct RankPlace {
  int rank = -1;
  std::string host;        // host name / id; ranks with equal hosts share memory
  int package = -1;        // CPU socket of the rank's binding (-1 unknown)
  int numa = -1;           // NUMA node (-1 unknown)
  std::vector<int> cores;  // logical CPUs the rank may run on
  std::string interface;   // network interface for TCP links ("" = choose)
  std::string ip;          // address peers connect to ("" = choose)
};

struct LinkClass {
  std::string name;            // "intra_group", "intra_host", "inter_host"
  double bandwidth_gbps = 0;   // GB/s (1e9 bytes) one direction, per rank pair
  double latency_us = 0;       // one-way small-message latency
};

struct HostInfo {
  std::string name;
  std::vector<int> ranks;                // ascending
  std::vector<std::vector<int>> groups;  // optional split inside the host (each ascending)
};

struct Topology {
  int version = kTopologyFileVersion;
  int world_size = 0;
  std::vector<RankPlace> ranks;   // indexed by rank
  std::vector<HostInfo> hosts;    // in order of their lowest rank
  std::vector<LinkClass> links;   // known link classes (defaults filled in)
  std::string source;             // "detected", "file <path>", "synthetic <desc>"

  const LinkClass* FindLink(const std::string& name) const;
  // Index into `hosts` of the host holding `rank`, or -1.
  int HostOf(int rank) const;
};

// Default link classes used when neither a file nor a measurement says
// otherwise (shared memory, loopback-class TCP).
std::vector<LinkClass> DefaultLinks();

// Parses and validates a topology file for a job of `world_size` ranks (0 =
// take the world from the file). Errors are InvalidArgument-class codes whose
// message names the file, the line and the field ("topo.json:12: hosts[1].ranks[3]:
// rank 9 is outside the world of 8 ranks").
Result<Topology> LoadTopologyFile(const std::string& path, int world_size = 0);
Result<Topology> ParseTopology(const std::string& text, const std::string& origin, int world_size = 0);
// The file form of a topology (what `choir topo --write` emits).
std::string TopologyToJson(const Topology& topology);

// This process's place: host (CHOIR_HOST_ID or hostname), package, NUMA node
// and cores of its CPU binding, via hwloc. `synthetic` ("pack:2 numa:1 core:4
// pu:1") describes a machine instead of reading the real one.
Result<RankPlace> DetectPlace(const std::string& synthetic = "");

// A synthetic job: `hosts` hosts of `ranks_per_host` ranks each (rank order
// host-major, or round-robin across hosts when `interleave`), each host
// described by the hwloc synthetic string (may be empty).
Topology SyntheticTopology(int hosts, int ranks_per_host, bool interleave,
                           const std::string& hwloc_synthetic = "");

// One row of what choir would do: for a collective and a size range, the
// algorithm chosen and the cost model's predicted time.
struct PlanRow {
  std::string collective;
  uint64_t min_bytes = 0;
  uint64_t max_bytes = 0;  // exclusive; UINT64_MAX = no limit
  std::string algorithm;
  double predicted_seconds_at_min = 0;
  double predicted_seconds_at_max = 0;  // at min(max_bytes, 1 GiB)
  std::string why;                       // one line: the comparison that decided
};
// The plan for every collective choir selects algorithms for, on `topology`,
// with the current settings (CHOIR_ALGO overrides apply).
Result<std::vector<PlanRow>> ExplainPlan(const Topology& topology);
// Levels and groups as indented text (hosts, groups inside hosts, links).
std::string DescribeTopology(const Topology& topology);

}  // namespace choir

#endif  // CHOIR_TOPOLOGY_H_
