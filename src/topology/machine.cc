#include "topology/machine.h"

#include <fmt/format.h>
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "base/strings.h"
#include "topology/build.h"

namespace choir::topology {
namespace {

// Multiplies the arities of a synthetic description ("pack:2 numa:1 core:4
// pu:1" -> 8) so that an absurd one is refused before hwloc allocates it.
// Tokens without a plain arity ("[numa]", attributes) count as 1; hwloc
// itself rejects what is not valid.
Status CheckSyntheticSize(const std::string& synthetic) {
  int64_t pus = 1;
  for (const std::string& raw : strings::Split(synthetic, ' ')) {
    std::string token = raw.substr(0, raw.find('('));
    const size_t colon = token.rfind(':');
    if (colon != std::string::npos) token = token.substr(colon + 1);
    if (token.empty() ||
        !std::all_of(token.begin(), token.end(), [](unsigned char c) { return std::isdigit(c); })) {
      continue;
    }
    const std::optional<int64_t> arity = strings::ParseInt(token);
    if (!arity || *arity > kMaxSyntheticPus ||
        (pus *= std::max<int64_t>(*arity, 1)) > kMaxSyntheticPus) {
      return InvalidArgument(
          fmt::format("the hwloc synthetic description \"{}\" has more than {} processing units",
                      synthetic, kMaxSyntheticPus));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<HwlocTopology> HwlocTopology::Load(const std::string& synthetic) {
  if (!synthetic.empty()) CHOIR_RETURN_IF_ERROR(CheckSyntheticSize(synthetic));
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0)
    return ErrnoError(Code::kSystemError, errno, "hwloc_topology_init");
  HwlocTopology topology;
  topology.handle_.reset(raw);
  if (!synthetic.empty() && hwloc_topology_set_synthetic(raw, synthetic.c_str()) != 0) {
    return InvalidArgument(
        fmt::format("hwloc rejected the synthetic description \"{}\" (expected levels such as "
                    "\"pack:2 numa:1 core:4 pu:1\")",
                    synthetic));
  }
  if (hwloc_topology_load(raw) != 0) {
    return ErrnoError(Code::kSystemError, errno,
                      synthetic.empty() ? "hwloc_topology_load (this machine)"
                                        : "hwloc_topology_load (synthetic \"" + synthetic + "\")");
  }
  return topology;
}

int ObjectNumber(hwloc_obj_t obj) {
  if (obj == nullptr) return -1;
  if (obj->os_index != HWLOC_UNKNOWN_INDEX) return static_cast<int>(obj->os_index);
  return static_cast<int>(obj->logical_index);
}

Result<MachineLayout> LoadMachineLayout(const std::string& synthetic) {
  CHOIR_ASSIGN_OR_RETURN(HwlocTopology hwloc, HwlocTopology::Load(synthetic));
  hwloc_topology_t t = hwloc.get();
  MachineLayout layout;
  layout.description = synthetic.empty() ? "this machine" : synthetic;
  layout.packages = std::max(0, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE));
  layout.numa_nodes = std::max(0, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE));
  layout.cores = std::max(0, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE));
  const int pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  for (int i = 0; i < pus; ++i) {
    hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, static_cast<unsigned>(i));
    if (pu == nullptr) continue;
    CpuPlace place;
    place.pu = static_cast<int>(pu->os_index);
    hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu);
    place.core = core == nullptr ? -1 : static_cast<int>(core->logical_index);
    place.package = ObjectNumber(hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, pu));
    // hwloc 2.x attaches NUMA nodes as memory children, so they are never a
    // PU's ancestor: find the node whose cpuset holds the PU instead.
    for (hwloc_obj_t numa = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, nullptr);
         numa != nullptr; numa = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, numa)) {
      if (numa->cpuset != nullptr && hwloc_bitmap_isset(numa->cpuset, pu->os_index)) {
        place.numa = ObjectNumber(numa);
        break;
      }
    }
    layout.pus.push_back(place);
  }
  return layout;
}

namespace {

// The value shared by every PU in `pus` (package or NUMA), or -1.
template <typename Field>
int Common(const std::vector<const CpuPlace*>& pus, Field field) {
  if (pus.empty()) return -1;
  const int first = pus.front()->*field;
  for (const CpuPlace* p : pus) {
    if (p->*field != first) return -1;
  }
  return first;
}

}  // namespace

std::vector<RankPlace> PlaceLocalRanks(const MachineLayout& machine, int ranks) {
  std::vector<RankPlace> places(static_cast<size_t>(std::max(ranks, 0)));
  for (int i = 0; i < ranks; ++i) places[static_cast<size_t>(i)].rank = i;
  if (machine.pus.empty() || ranks <= 0) return places;

  // NUMA domains in PU order (unknown NUMA = one domain for the whole machine).
  std::vector<int> domain_order;
  std::map<int, std::vector<const CpuPlace*>> domains;
  for (const CpuPlace& pu : machine.pus) {
    if (domains.find(pu.numa) == domains.end()) domain_order.push_back(pu.numa);
    domains[pu.numa].push_back(&pu);
  }
  const int64_t domain_count = static_cast<int64_t>(domain_order.size());

  // Contiguous blocks of ranks per domain: rank i goes to domain i*D/n.
  std::vector<std::vector<int>> ranks_of_domain(domain_order.size());
  for (int i = 0; i < ranks; ++i) {
    ranks_of_domain[static_cast<size_t>(i * domain_count / ranks)].push_back(i);
  }
  for (size_t d = 0; d < domain_order.size(); ++d) {
    const std::vector<const CpuPlace*>& pus = domains[domain_order[d]];
    const std::vector<int>& members = ranks_of_domain[d];
    const int64_t p = static_cast<int64_t>(pus.size());
    const int64_t k = static_cast<int64_t>(members.size());
    for (int64_t j = 0; j < k; ++j) {
      int64_t begin = j * p / k;
      int64_t end = (j + 1) * p / k;
      if (end <= begin) end = begin + 1;  // more ranks than PUs: share
      const std::vector<const CpuPlace*> mine(pus.begin() + begin, pus.begin() + end);
      RankPlace& place = places[static_cast<size_t>(members[static_cast<size_t>(j)])];
      for (const CpuPlace* pu : mine) place.cores.push_back(pu->pu);
      std::sort(place.cores.begin(), place.cores.end());
      place.package = Common(mine, &CpuPlace::package);
      place.numa = Common(mine, &CpuPlace::numa);
    }
  }
  return places;
}

BindingPlan PlanBinding(const MachineLayout& machine, const std::vector<int>& allowed, int local_ranks) {
  BindingPlan plan;
  MachineLayout usable = machine;
  const std::set<int> allowed_set(allowed.begin(), allowed.end());
  usable.pus.clear();
  std::set<int> numa_nodes;
  for (const CpuPlace& pu : machine.pus) {
    if (allowed_set.count(pu.pu) == 0) continue;
    usable.pus.push_back(pu);
    numa_nodes.insert(pu.numa);
  }
  const int cpus = static_cast<int>(usable.pus.size());
  const int nodes = static_cast<int>(numa_nodes.size());
  if (local_ranks <= 1) {
    plan.summary = "binding: 1 rank, left free";
    return plan;
  }
  if (cpus < local_ranks) {
    plan.summary = fmt::format("binding: {} ranks on {} CPUs share them, not bound", local_ranks, cpus);
    return plan;
  }
  if (local_ranks < nodes) {
    plan.summary = fmt::format("binding: {} ranks on {} NUMA nodes, not bound (binding would idle nodes)",
                               local_ranks, nodes);
    return plan;
  }
  // Nodes with few allowed CPUs would get as many ranks as the others:
  // binding then would pin ranks onto shared CPUs while others stay free.
  const std::vector<RankPlace> places = PlaceLocalRanks(usable, local_ranks);
  std::set<int> taken;
  for (const RankPlace& p : places) {
    for (int cpu : p.cores) {
      if (!taken.insert(cpu).second) {
        plan.summary = fmt::format("binding: the allowed CPUs are spread too unevenly over the NUMA nodes for {} "
                                   "ranks, not bound",
                                   local_ranks);
        return plan;
      }
    }
  }
  std::string list;
  for (const RankPlace& p : places) {
    RankBinding b;
    b.cpus = p.cores;
    // A memory preference only means something with several nodes.
    b.numa = machine.numa_nodes > 1 ? p.numa : -1;
    list += fmt::format("{}rank {} -> CPU {}{}", list.empty() ? "" : ", ", p.rank, FormatRankList(b.cpus),
                        p.numa >= 0 ? fmt::format(" (NUMA {})", p.numa) : "");
    plan.ranks.push_back(std::move(b));
  }
  plan.summary = "binding: " + list + " (--bind none leaves them free)";
  return plan;
}

Result<BindingPlan> PlanBindingHere(int local_ranks) {
  CHOIR_ASSIGN_OR_RETURN(MachineLayout machine, LoadMachineLayout(""));
  std::vector<int> allowed;
  if (!AffinityCpus(&allowed)) {
    // More CPUs than a cpu_set_t holds: do not bind what cannot be read.
    return BindingPlan{{}, fmt::format("binding: cannot read this launcher's CPU affinity ({}), not bound",
                                       std::strerror(errno))};
  }
  return PlanBinding(machine, allowed, local_ranks);
}

size_t CacheBytes(int level) {
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level");
    if (!level_file) break;
    std::string found;
    level_file >> found;
    if (strings::ParseInt(found) != level) continue;
    std::ifstream size_file(dir + "size");
    std::string text;
    size_file >> text;
    return strings::ParseBytes(text).value_or(0);  // "32768K"
  }
  return 0;
}

CpuVendor HostCpuVendor() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return CpuVendor::kOther;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);  // the 12-byte vendor string sits in ebx, edx, ecx
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  if (std::strcmp(vendor, "GenuineIntel") == 0) return CpuVendor::kIntel;
  if (std::strcmp(vendor, "AuthenticAMD") == 0) return CpuVendor::kAmd;
#endif
  return CpuVendor::kOther;
}

CpuModel DecodeCpuSignature(uint32_t eax) {
  CpuModel m;
  const int base_family = static_cast<int>((eax >> 8) & 0xf);
  const int base_model = static_cast<int>((eax >> 4) & 0xf);
  m.family = base_family == 0xf ? base_family + static_cast<int>((eax >> 20) & 0xff) : base_family;
  m.model = base_family == 0xf || base_family == 0x6 ? (static_cast<int>((eax >> 16) & 0xf) << 4) | base_model
                                                     : base_model;
  return m;
}

CpuModel HostCpuModel() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0) return DecodeCpuSignature(eax);
#endif
  return CpuModel{};
}

bool AffinityCpus(std::vector<int>* cpus) {
  cpus->clear();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return false;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus->push_back(cpu);
  }
  return true;
}

}  // namespace choir::topology
