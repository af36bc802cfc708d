// One machine as hwloc sees it, reduced to what rank placement needs: every
// processing unit (PU) with its core, package and NUMA node. The machine is
// the real one or an hwloc synthetic description ("pack:2 numa:1 core:4
// pu:1"), which lets tests and `choir topo` reason about machines they do not
// run on. Binding is never done here (with a synthetic topology it would be a
// silent no-op anyway); the launcher binds, as PlanBinding says.
//
// Thread-safety: HwlocTopology is a move-only owner used by one thread at a
// time; the functions are thread-safe.
#ifndef CHOIR_TOPOLOGY_MACHINE_H_
#define CHOIR_TOPOLOGY_MACHINE_H_

#include <hwloc.h>

#include <memory>
#include <string>
#include <vector>

#include "choir/status.h"
#include "choir/topology.h"

namespace choir::topology {

// Synthetic descriptions with more PUs than this are rejected before hwloc
// builds them ("pack:1000 core:1000 pu:1000" would take gigabytes).
inline constexpr int kMaxSyntheticPus = 16384;

// Owns an hwloc topology handle.
class HwlocTopology {
 public:
  // Loads this machine ("") or a synthetic description. Errors: InvalidArgument
  // for a description hwloc rejects or that is too large, SystemError when
  // hwloc cannot read this machine.
  static Result<HwlocTopology> Load(const std::string& synthetic);

  hwloc_topology_t get() const { return handle_.get(); }

 private:
  struct Destroy {
    void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
  };
  std::unique_ptr<hwloc_topology, Destroy> handle_;
};

// Owns an hwloc bitmap (cpuset).
struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

// The package / NUMA number hwloc shows as P# (what numactl and lstopo print),
// or its logical index when the OS gave none; -1 for no object.
int ObjectNumber(hwloc_obj_t obj);

struct CpuPlace {
  int pu = -1;    // OS number of the PU (what taskset and sched_setaffinity use)
  int core = -1;  // logical index of its core
  int package = -1;
  int numa = -1;
};

struct MachineLayout {
  std::string description;    // "this machine" or the synthetic string
  std::vector<CpuPlace> pus;  // hwloc logical order
  int packages = 0;
  int numa_nodes = 0;
  int cores = 0;
};

Result<MachineLayout> LoadMachineLayout(const std::string& synthetic);

// Where `ranks` ranks started on `machine` would run if a launcher binds them
// the way choir's does: ranks are spread over NUMA nodes in contiguous blocks
// (ranks 0..k-1 on the first node), and each node's PUs are split evenly
// between its ranks (several ranks share a PU only when ranks outnumber PUs).
// Only package, numa and cores are filled in.
std::vector<RankPlace> PlaceLocalRanks(const MachineLayout& machine, int ranks);

// How `choir run` binds the ranks it starts on a host: each to the CPUs and
// memory of its own NUMA node, as PlaceLocalRanks places them, over the CPUs
// the launcher itself may use. Nobody is bound for a single rank, more ranks
// than CPUs (they must share and yield), or fewer ranks than NUMA nodes
// (binding would idle whole nodes).
struct RankBinding {
  std::vector<int> cpus;  // OS CPU numbers; empty: not bound
  int numa = -1;          // memory preferred from this node; -1: no preference
};
struct BindingPlan {
  std::vector<RankBinding> ranks;  // by local rank; empty when nobody is bound
  std::string summary;             // one line: what was done and why
};
// `allowed`: OS CPU numbers the launcher may use.
BindingPlan PlanBinding(const MachineLayout& machine, const std::vector<int>& allowed, int local_ranks);
// The same for this machine and this process's CPU affinity.
Result<BindingPlan> PlanBindingHere(int local_ranks);

// The OS CPU numbers this process may run on (sched_getaffinity); false,
// with errno set, when they cannot be read.
bool AffinityCpus(std::vector<int>* cpus);

// Bytes of CPU 0's cache at `level` (3: the last level on x86) as the kernel
// lists it in /sys/devices/system/cpu/cpu0/cache, what lscpu and hwloc show;
// 0 when it is not listed. Read there rather than through HwlocTopology,
// whose load took 5-14 ms here (5 loads), because an algorithm asks for it
// on its first call. Not sysconf(_SC_LEVEL3_CACHE_SIZE): glibc's cpuid
// reading gave 256 MiB on an AMD EPYC VM whose kernel and hwloc say 32 MiB.
size_t CacheBytes(int level);

// The CPU's maker, from the cpuid instruction (kOther off x86). Same-host
// algorithm switch points are measured per maker and, for AMD, per
// generation (algorithms/switch_points.h).
enum class CpuVendor { kOther, kIntel, kAmd };
CpuVendor HostCpuVendor();
// The CPU's family and model as cpuid leaf 1 gives them (with the extended
// fields added, as lscpu shows them); {0, 0} off x86.
struct CpuModel {
  int family = 0;
  int model = 0;
};
CpuModel HostCpuModel();
// The same from a cpuid leaf 1 eax value: the extended family counts when
// the base family is 15, the extended model when it is 6 or 15.
CpuModel DecodeCpuSignature(uint32_t eax);

}  // namespace choir::topology

#endif  // CHOIR_TOPOLOGY_MACHINE_H_
