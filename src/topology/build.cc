#include "topology/build.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace choir::topology {

Topology AssembleTopology(std::vector<RankPlace> places, std::string source) {
  Topology topology;
  topology.world_size = static_cast<int>(places.size());
  topology.source = std::move(source);
  topology.links = DefaultLinks();
  std::map<std::string, size_t> host_index;
  for (size_t r = 0; r < places.size(); ++r) {
    places[r].rank = static_cast<int>(r);
    auto [it, added] = host_index.emplace(places[r].host, topology.hosts.size());
    if (added) topology.hosts.push_back(HostInfo{places[r].host, {}, {}});
    // Ranks arrive in ascending order, so hosts come out ordered by lowest rank.
    topology.hosts[it->second].ranks.push_back(static_cast<int>(r));
  }
  topology.ranks = std::move(places);
  AddGroupsFromPlaces(topology);
  return topology;
}

void AddGroupsFromPlaces(Topology& topology) {
  for (HostInfo& host : topology.hosts) {
    host.groups.clear();
    std::set<int> packages;
    std::set<int> numas;
    bool unknown = false;
    for (int r : host.ranks) {
      const RankPlace& place = topology.ranks[static_cast<size_t>(r)];
      packages.insert(place.package);
      numas.insert(place.numa);
      unknown = unknown || place.package < 0 || place.numa < 0;
    }
    const bool by_package = packages.size() > 1;
    if (unknown || (!by_package && numas.size() <= 1)) continue;
    // Groups keyed by their lowest rank, so they come out in rank order.
    std::map<int, std::vector<int>> groups;
    std::map<int, int> group_of_key;  // package or NUMA -> lowest rank on it
    for (int r : host.ranks) {
      const RankPlace& place = topology.ranks[static_cast<size_t>(r)];
      const int key = by_package ? place.package : place.numa;
      auto [it, added] = group_of_key.emplace(key, r);
      groups[it->second].push_back(r);
    }
    for (auto& [lowest, ranks] : groups) host.groups.push_back(std::move(ranks));
  }
}

Topology JobTopology(const std::vector<std::string>& host_names, int ranks_per_host,
                     bool interleave, const MachineLayout* machine, std::string source) {
  const int64_t hosts = static_cast<int64_t>(host_names.size());
  if (hosts <= 0 || ranks_per_host <= 0 || hosts * ranks_per_host > kMaxWorldSize) {
    Topology empty;
    empty.links = DefaultLinks();
    empty.source = fmt::format("{} (no job: {} hosts x {} ranks is out of range)", source, hosts,
                               ranks_per_host);
    return empty;
  }
  const std::vector<RankPlace> local =
      machine != nullptr ? PlaceLocalRanks(*machine, ranks_per_host)
                         : std::vector<RankPlace>(static_cast<size_t>(ranks_per_host));
  std::vector<RankPlace> places(static_cast<size_t>(hosts * ranks_per_host));
  for (int64_t h = 0; h < hosts; ++h) {
    for (int64_t i = 0; i < ranks_per_host; ++i) {
      const int64_t rank = interleave ? i * hosts + h : h * ranks_per_host + i;
      RankPlace& place = places[static_cast<size_t>(rank)];
      place = local[static_cast<size_t>(i)];
      place.rank = static_cast<int>(rank);
      place.host = host_names[static_cast<size_t>(h)];
    }
  }
  return AssembleTopology(std::move(places), std::move(source));
}

std::string FormatRankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace choir::topology
