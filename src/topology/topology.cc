// The topology model: link defaults, lookups, synthetic jobs and the text
// description `choir topo` prints.
#include "choir/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "topology/build.h"
#include "topology/machine.h"

namespace choir {

using topology::FormatRankList;

const LinkClass* Topology::FindLink(const std::string& name) const {
  for (const LinkClass& link : links) {
    if (link.name == name) return &link;
  }
  return nullptr;
}

int Topology::HostOf(int rank) const {
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (std::binary_search(hosts[h].ranks.begin(), hosts[h].ranks.end(), rank)) {
      return static_cast<int>(h);
    }
  }
  return -1;
}

// Defaults, to be tuned by measurement: order-of-magnitude figures for a
// current two-socket server, so that the cost model ranks the levels right
// even when nobody measured them. Shared memory inside one socket (a
// memcpy-class copy between cores sharing a memory controller); shared memory
// across the socket link (UPI / Infinity Fabric roughly halves it and doubles
// the latency); TCP between hosts (25 GbE ~ 3 GB/s, tens of microseconds
// through the kernel stack).
std::vector<LinkClass> DefaultLinks() {
  return {
      LinkClass{"intra_group", 20.0, 0.5},
      LinkClass{"intra_host", 10.0, 1.0},
      LinkClass{"inter_host", 3.0, 20.0},
  };
}

Topology SyntheticTopology(int hosts, int ranks_per_host, bool interleave,
                           const std::string& hwloc_synthetic) {
  std::vector<std::string> names;
  if (hosts > 0 && hosts <= topology::kMaxWorldSize) {
    for (int h = 0; h < hosts; ++h) names.push_back(fmt::format("host{}", h));
  }
  std::string source = fmt::format(
      "synthetic: {} host{} x {} rank{}{}", hosts, hosts == 1 ? "" : "s", ranks_per_host,
      ranks_per_host == 1 ? "" : "s", interleave ? ", interleaved" : "");
  if (hwloc_synthetic.empty()) {
    return topology::JobTopology(names, ranks_per_host, interleave, nullptr, std::move(source));
  }
  Result<topology::MachineLayout> machine = topology::LoadMachineLayout(hwloc_synthetic);
  if (!machine.ok()) {
    // The signature has no Status; say why the places are unknown instead.
    source +=
        fmt::format(", hwloc \"{}\" unusable ({})", hwloc_synthetic, machine.status().message());
    return topology::JobTopology(names, ranks_per_host, interleave, nullptr, std::move(source));
  }
  source += fmt::format(", hwloc \"{}\"", hwloc_synthetic);
  return topology::JobTopology(names, ranks_per_host, interleave, &*machine, std::move(source));
}

namespace {

std::string Place(int value) { return value < 0 ? "?" : fmt::format("{}", value); }

// "rank 3" or "ranks 0-3".
std::string Ranks(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + FormatRankList(ranks);
}

// "4" or "3-5" for the sizes of several things.
std::string SizeRange(const std::vector<size_t>& sizes) {
  if (sizes.empty()) return "0";
  const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
  return *lo == *hi ? fmt::format("{}", *lo) : fmt::format("{}-{}", *lo, *hi);
}

// " (package 0, NUMA 1)" when every rank of `ranks` shares them.
std::string SharedPlace(const Topology& topology, const std::vector<int>& ranks) {
  std::set<int> packages;
  std::set<int> numas;
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(topology.ranks.size())) continue;
    packages.insert(topology.ranks[static_cast<size_t>(r)].package);
    numas.insert(topology.ranks[static_cast<size_t>(r)].numa);
  }
  std::vector<std::string> parts;
  if (packages.size() == 1 && *packages.begin() >= 0) {
    parts.push_back(fmt::format("package {}", *packages.begin()));
  }
  if (numas.size() == 1 && *numas.begin() >= 0)
    parts.push_back(fmt::format("NUMA {}", *numas.begin()));
  return parts.empty() ? "" : fmt::format(" ({})", fmt::join(parts, ", "));
}

std::string RankLine(const RankPlace& place) {
  std::string line =
      fmt::format("rank {}: package {}, NUMA {}, cores {}", place.rank, Place(place.package),
                  Place(place.numa), place.cores.empty() ? "?" : FormatRankList(place.cores));
  if (!place.interface.empty()) line += ", interface " + place.interface;
  if (!place.ip.empty()) line += ", ip " + place.ip;
  return line;
}

// What each link class carries in this topology.
std::string LinkUse(const Topology& topology, const std::string& name) {
  std::vector<size_t> host_sizes;
  std::vector<size_t> group_sizes;
  size_t groups = 0;
  for (const HostInfo& host : topology.hosts) {
    host_sizes.push_back(host.ranks.size());
    for (const std::vector<int>& g : host.groups) group_sizes.push_back(g.size());
    groups += host.groups.size();
  }
  const size_t hosts = topology.hosts.size();
  if (name == "intra_group") {
    if (groups == 0) return "not used (no groups inside hosts)";
    const std::string size = SizeRange(group_sizes);
    return fmt::format("inside a group: {} group{} of {} rank{}", groups, groups == 1 ? "" : "s",
                       size, size == "1" ? "" : "s");
  }
  if (name == "intra_host") {
    if (std::all_of(host_sizes.begin(), host_sizes.end(), [](size_t s) { return s <= 1; })) {
      return "not used (one rank per host)";
    }
    return groups == 0 ? fmt::format("inside a host: {} host{} of {} ranks", hosts,
                                     hosts == 1 ? "" : "s", SizeRange(host_sizes))
                       : "between the groups of a host";
  }
  if (name == "inter_host") {
    return hosts <= 1 ? "not used (one host)" : fmt::format("between hosts: {} hosts", hosts);
  }
  return "";
}

}  // namespace

std::string DescribeTopology(const Topology& topology) {
  std::string out;
  auto line = [&out](int indent, const std::string& text) {
    out += std::string(static_cast<size_t>(indent) * 2, ' ') + text + '\n';
  };
  line(0, "source: " + (topology.source.empty() ? std::string("unknown") : topology.source));
  std::vector<size_t> host_sizes;
  std::vector<size_t> groups_per_host;
  for (const HostInfo& host : topology.hosts) {
    host_sizes.push_back(host.ranks.size());
    groups_per_host.push_back(host.groups.size());
  }
  const size_t hosts = topology.hosts.size();
  std::string world = fmt::format("world: {} rank{} on {} host{} ({} per host)",
                                  topology.world_size, topology.world_size == 1 ? "" : "s", hosts,
                                  hosts == 1 ? "" : "s", SizeRange(host_sizes));
  if (std::any_of(groups_per_host.begin(), groups_per_host.end(), [](size_t g) { return g > 0; })) {
    world += fmt::format(", {} groups per host", SizeRange(groups_per_host));
  }
  line(0, world);

  line(0, "levels (fastest first):");
  size_t name_width = 0;
  for (const LinkClass& link : topology.links) name_width = std::max(name_width, link.name.size());
  for (const LinkClass& link : topology.links) {
    line(1, fmt::format("{:<{}}  {:>6g} GB/s  {:>6g} us  {}", link.name, name_width,
                        link.bandwidth_gbps, link.latency_us, LinkUse(topology, link.name)));
  }

  line(0, "hosts:");
  for (const HostInfo& host : topology.hosts) {
    line(1, fmt::format("{}: {}", host.name, Ranks(host.ranks)));
    const auto rank_line = [&](int indent, int r) {
      if (r >= 0 && r < static_cast<int>(topology.ranks.size())) {
        line(indent, RankLine(topology.ranks[static_cast<size_t>(r)]));
      }
    };
    if (host.groups.empty()) {
      for (int r : host.ranks) rank_line(2, r);
      continue;
    }
    for (size_t g = 0; g < host.groups.size(); ++g) {
      line(2, fmt::format("group {}: {}{}", g, Ranks(host.groups[g]),
                          SharedPlace(topology, host.groups[g])));
      for (int r : host.groups[g]) rank_line(3, r);
    }
  }
  return out;
}

}  // namespace choir
