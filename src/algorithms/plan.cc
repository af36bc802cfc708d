// ExplainPlan: what selection picks per collective and size range on a
// topology, with the cost model's predicted times (`choir topo`).
#include <unistd.h>

#include <fmt/format.h>

#include "algorithms/layout.h"
#include "algorithms/select.h"
#include "choir/topology.h"
#include "params/params.h"
#include "topology/machine.h"
#include "transport/endpoint.h"

namespace choir {
namespace {

using algorithms::CollKind;

algorithms::OpArgs ArgsFor(CollKind kind, uint64_t bytes, int world) {
  algorithms::OpArgs a;
  a.kind = kind;
  a.dtype = DataType::kFloat32;
  const bool whole = kind == CollKind::kReduceScatter || kind == CollKind::kAllgather || kind == CollKind::kAlltoall;
  a.count = static_cast<size_t>(bytes / 4 / (whole ? static_cast<uint64_t>(world) : 1));
  return a;
}

double Predict(const algorithms::Algorithm& a, const algorithms::GroupView& g, const algorithms::OpArgs& args) {
  if (a.predict != nullptr && g.multi_host()) return a.predict(g, args);
  // Same-host algorithms: one pass through shared memory.
  return g.intra_host.latency_s + static_cast<double>(args.SelectionBytes(g.size)) / g.intra_host.bandwidth_bps;
}

}  // namespace

namespace algorithms {
LinkCost LinkCostOf(const Topology& t, const std::string& name, LinkCost fallback) {
  for (const LinkClass& l : t.links) {
    if (l.name == name && l.bandwidth_gbps > 0) return {l.latency_us * 1e-6, l.bandwidth_gbps * 1e9};
  }
  return fallback;
}
}  // namespace algorithms

Result<std::vector<PlanRow>> ExplainPlan(const Topology& topology) {
  const int world = topology.world_size > 0 ? topology.world_size : static_cast<int>(topology.ranks.size());
  if (world < 1) return InvalidArgument("the topology has no ranks");
  std::vector<std::string> host_of(static_cast<size_t>(world));
  for (const HostInfo& h : topology.hosts) {
    for (int r : h.ranks) {
      if (r >= 0 && r < world) host_of[static_cast<size_t>(r)] = h.name;
    }
  }
  for (int r = 0; r < world; ++r) {
    if (host_of[static_cast<size_t>(r)].empty()) return InvalidArgument(fmt::format("rank {} is on no host", r));
  }
  const algorithms::Layout layout = algorithms::Layout::FromHostNames(host_of);
  algorithms::GroupView view;
  view.size = world;
  view.layout = &layout;
  view.same_host = layout.num_hosts() == 1 && world > 1;
  view.cma = view.same_host && params::GetString(params::Id::kShmCma) != "off";
  if (view.same_host) {
    std::vector<std::vector<int>> cores;
    for (const RankPlace& p : topology.ranks) cores.push_back(p.cores);
    if (cores.size() != static_cast<size_t>(world)) cores.assign(static_cast<size_t>(world), {});
    view.shares_cpus = transport::RanksCompeteForCpus(cores, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  }
  view.slot_bytes = view.same_host ? params::GetBytes(params::Id::kShmSlotBytes) : 0;
  view.pipe_bytes = view.same_host ? params::GetBytes(params::Id::kShmPipeBytes) : 0;
  view.pipe_cache_bytes = view.same_host ? topology::CacheBytes(2) : 0;
  view.switch_table = algorithms::ConfiguredSwitchTable();
  view.intra_host = algorithms::LinkCostOf(topology, "intra_host", view.intra_host);
  view.inter_host = algorithms::LinkCostOf(topology, "inter_host", view.inter_host);
  algorithms::SelectConfig config;
  config.small_bytes = params::GetBytes(params::Id::kSmallBytes);
  CHOIR_ASSIGN_OR_RETURN(config.rules, algorithms::ParseAlgoRules(params::GetString(params::Id::kAlgo)));

  std::vector<PlanRow> rows;
  const CollKind kinds[] = {CollKind::kAllreduce, CollKind::kReduceScatter, CollKind::kAllgather,
                            CollKind::kBroadcast, CollKind::kReduce, CollKind::kAlltoall};
  constexpr uint64_t kMax = uint64_t{1} << 30;
  for (CollKind kind : kinds) {
    PlanRow* open = nullptr;
    for (uint64_t bytes = 8; bytes <= kMax; bytes *= 2) {
      const algorithms::OpArgs args = ArgsFor(kind, bytes, world);
      if (args.count == 0) continue;
      std::string why;
      CHOIR_ASSIGN_OR_RETURN(const algorithms::Algorithm* a, algorithms::SelectAlgorithm(view, args, config, "", "", &why));
      const double t = Predict(*a, view, args);
      if (open != nullptr && open->algorithm == a->name) {
        open->max_bytes = bytes * 2;
        open->predicted_seconds_at_max = t;
        continue;
      }
      rows.push_back(PlanRow{algorithms::CollKindName(kind), bytes, bytes * 2, a->name, t, t, why});
      open = &rows.back();
    }
    if (open != nullptr) open->max_bytes = UINT64_MAX;
  }
  return rows;
}

}  // namespace choir
