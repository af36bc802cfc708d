// DetectPlace: this process's host identity and CPU place through hwloc.
// Detection must never stop a job: when hwloc cannot read the machine the
// place keeps its unknown (-1) fields and the reason is logged; only a bad
// synthetic description (a caller's mistake) is an error.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/logging.h"
#include "choir/topology.h"
#include "params/params.h"
#include "topology/machine.h"

namespace choir {
namespace {

using topology::Bitmap;
using topology::ObjectNumber;

std::string LocalHostName() {
  std::string id = params::GetString(params::Id::kHostId);
  if (!id.empty()) return id;
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// The one object of `type` whose cpuset contains all of `set`, or nullptr
// (none, or `set` spans several).
hwloc_obj_t Enclosing(hwloc_topology_t t, hwloc_obj_type_t type, hwloc_const_bitmap_t set) {
  if (hwloc_bitmap_iszero(set)) return nullptr;
  for (hwloc_obj_t obj = hwloc_get_next_obj_by_type(t, type, nullptr); obj != nullptr;
       obj = hwloc_get_next_obj_by_type(t, type, obj)) {
    if (obj->cpuset != nullptr && hwloc_bitmap_isincluded(set, obj->cpuset)) return obj;
  }
  return nullptr;
}

// Fills package, numa and cores of `place` from the PUs in `set`.
void PlaceOf(hwloc_topology_t t, hwloc_const_bitmap_t set, RankPlace& place) {
  for (int pu = hwloc_bitmap_first(set); pu >= 0; pu = hwloc_bitmap_next(set, pu)) {
    place.cores.push_back(pu);
  }
  hwloc_obj_t numa = Enclosing(t, HWLOC_OBJ_NUMANODE, set);
  place.numa = ObjectNumber(numa);
  // NUMA nodes are memory children in hwloc 2.x: ask for the package that is
  // the NUMA object's own ancestor (its parent may be a cache or a group).
  hwloc_obj_t package =
      numa == nullptr ? nullptr : hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, numa);
  // A NUMA node can also hang above the packages (one node per machine):
  // then the package is the one holding the whole binding, if there is one.
  if (package == nullptr) package = Enclosing(t, HWLOC_OBJ_PACKAGE, set);
  place.package = ObjectNumber(package);
}

}  // namespace

Result<RankPlace> DetectPlace(const std::string& synthetic) {
  RankPlace place;
  place.host = LocalHostName();
  Result<topology::HwlocTopology> hwloc = topology::HwlocTopology::Load(synthetic);
  if (!hwloc.ok()) {
    if (!synthetic.empty()) return hwloc.status();
    CHOIR_LOG(Warn, TOPO, "hwloc cannot read this machine ({}); only the CPU affinity is known",
              hwloc.status().ToString());
    // The ranks of a host compare their CPUs to decide whether they share
    // cores, a verdict that picks algorithms: publish at least the affinity
    // (empty when even that cannot be read).
    topology::AffinityCpus(&place.cores);
    return place;
  }
  hwloc_topology_t t = hwloc->get();
  Bitmap set(hwloc_bitmap_alloc());
  if (set == nullptr) return place;
  if (!synthetic.empty()) {
    // Binding on a synthetic topology is a silent no-op and reports every PU,
    // so a described machine answers with its first PU.
    hwloc_obj_t first = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, 0);
    if (first == nullptr)
      return InvalidArgument("the synthetic description \"" + synthetic + "\" has no PU");
    hwloc_bitmap_only(set.get(), first->os_index);
  } else if (hwloc_get_cpubind(t, set.get(), HWLOC_CPUBIND_PROCESS) != 0 &&
             hwloc_get_cpubind(t, set.get(), HWLOC_CPUBIND_THREAD) != 0) {
    CHOIR_LOG(Warn, TOPO, "hwloc_get_cpubind failed ({}); only the CPU affinity is known",
              std::strerror(errno));
    topology::AffinityCpus(&place.cores);  // as above
    return place;
  }
  // Only PUs hwloc knows about (a binding may name offline CPUs).
  hwloc_bitmap_and(set.get(), set.get(), hwloc_topology_get_topology_cpuset(t));
  PlaceOf(t, set.get(), place);
  return place;
}

}  // namespace choir
