// Cost: intra-host reduce-scatter + inter-host exchange of N/L per rank (all
// L local ranks of a host working in parallel on their own slice, sharing the
// host's link) + intra-host allgather; 2(H-1)/H * N bytes leave each host for
// allreduce, against 2(n-1)/n * N per hop for a ring that crosses hosts.
//
// hier: hierarchical algorithms composed from sub-groups of the communicator
// (ARCHITECTURE.md): the ranks of one host ("intra" level, shared memory:
// single copy when allowed, rings otherwise) and the rails, i.e. the ranks
// with the same local index on every host ("inter" level, TCP). Sub-steps
// choose their own algorithms (CHOIR_ALGO rules with @intra / @inter).
// Hosts may hold different numbers of ranks: the number of rails is the
// smallest host's rank count, and extra local ranks take part only inside
// their host. Reduce-scatter and allgather need equal hosts.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/block_steps.h"
#include "algorithms/select.h"

namespace choir::algorithms {
namespace {

constexpr int kPermuteSlot = 1;
constexpr int kRailSlot = 2;

// Runs `args` on the sub-group `sub` with the algorithm selection picks for `level`.
Status RunStep(Context& sub, const OpArgs& args, const char* level) {
  static const SelectConfig kDefaults;
  const SelectConfig& config = sub.select_config() ? *sub.select_config() : kDefaults;
  CHOIR_ASSIGN_OR_RETURN(const Algorithm* a, SelectAlgorithm(sub.View(), args, config, "", level));
  return a->fn(sub, args);
}

// Blocks of the host's local ranks: local index j < rails gets slice j.
Blocks HostBlocks(size_t count, int local_ranks, int rails) {
  Blocks blocks(static_cast<size_t>(local_ranks), patterns::Block{count, 0});
  for (int j = 0; j < rails; ++j) blocks[static_cast<size_t>(j)] = patterns::EvenBlock(count, rails, j);
  return blocks;
}

ReduceOp StepOp(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

}  // namespace

Status AllreduceHier(Context& c, const OpArgs& a) {
  const Layout& l = *c.layout();
  const int me = c.rank();
  const auto& host = l.hosts[static_cast<size_t>(l.host_of[static_cast<size_t>(me)])];
  const int j = l.local_index[static_cast<size_t>(me)];
  const int rails = l.rails();
  const size_t es = c.elem_size();
  auto* out = static_cast<uint8_t*>(a.recv);
  const Context sum = c.WithOp(StepOp(a.op));
  const Blocks blocks = HostBlocks(a.count, static_cast<int>(host.size()), rails);
  const auto& mine = blocks[static_cast<size_t>(j)];

  Context host_ctx = sum.Subgroup(host);
  CHOIR_RETURN_IF_ERROR(ReduceScatterBlocks(host_ctx, static_cast<const uint8_t*>(a.send),
                                            out + mine.offset * es, blocks));
  if (j < rails) {
    Context rail = sum.Subgroup(l.Rail(j));
    OpArgs step = a;
    step.op = StepOp(a.op);
    step.send = step.recv = out + mine.offset * es;
    step.count = mine.count;
    CHOIR_RETURN_IF_ERROR(RunStep(rail, step, "inter"));
    if (a.op == ReduceOp::kAvg && mine.count > 0) kernels::DivideByCount(out + mine.offset * es, mine.count, c.dtype(), l.world());
  }
  return AllgatherBlocks(host_ctx, out, blocks);
}

// Reduce-scatter on equal hosts: permute the input so that each rail's blocks
// are contiguous, reduce-scatter those rail chunks inside the host, then
// reduce-scatter each chunk along its rail.
Status ReduceScatterHier(Context& c, const OpArgs& a) {
  const Layout& l = *c.layout();
  const int hosts = l.num_hosts();
  const int local = static_cast<int>(l.hosts[0].size());
  const size_t es = c.elem_size();
  const size_t block = a.count * es;
  const size_t chunk = static_cast<size_t>(hosts) * block;  // one rail's blocks
  const auto* in = static_cast<const uint8_t*>(a.send);
  CHOIR_ASSIGN_OR_RETURN(uint8_t* permuted, c.ScratchBytes(chunk * static_cast<size_t>(local), kPermuteSlot));
  for (int r = 0; r < local; ++r) {
    for (int g = 0; g < hosts; ++g) {
      const int owner = l.hosts[static_cast<size_t>(g)][static_cast<size_t>(r)];
      kernels::CopyBytes(permuted + static_cast<size_t>(r) * chunk + static_cast<size_t>(g) * block,
                         in + static_cast<size_t>(owner) * block, block, /*nontemporal=*/false);
    }
  }
  const int me = c.rank();
  const int j = l.local_index[static_cast<size_t>(me)];
  const Context sum = c.WithOp(StepOp(a.op));
  CHOIR_ASSIGN_OR_RETURN(uint8_t* rail_buf, c.ScratchBytes(chunk, kRailSlot));
  Context host_ctx = sum.Subgroup(l.hosts[static_cast<size_t>(l.host_of[static_cast<size_t>(me)])]);
  CHOIR_RETURN_IF_ERROR(ReduceScatterBlocks(host_ctx, permuted, rail_buf, EvenBlocks(a.count * static_cast<size_t>(hosts * local), local)));
  Context rail = sum.Subgroup(l.Rail(j));
  CHOIR_RETURN_IF_ERROR(RingReduceScatterBlocks(rail, rail_buf, static_cast<uint8_t*>(a.recv),
                                                EvenBlocks(a.count * static_cast<size_t>(hosts), hosts)));
  FinishAverage(c, a.recv, a.count);
  return Status::Ok();
}

// Allgather on equal hosts: gather along the rail, then exchange the rail
// chunks inside the host, then put the blocks back in rank order.
Status AllgatherHier(Context& c, const OpArgs& a) {
  const Layout& l = *c.layout();
  const int hosts = l.num_hosts();
  const int local = static_cast<int>(l.hosts[0].size());
  const size_t es = c.elem_size();
  const size_t block = a.count * es;
  const size_t chunk = static_cast<size_t>(hosts) * block;
  const int me = c.rank();
  const int g_me = l.host_of[static_cast<size_t>(me)];
  const int j = l.local_index[static_cast<size_t>(me)];
  CHOIR_ASSIGN_OR_RETURN(uint8_t* permuted, c.ScratchBytes(chunk * static_cast<size_t>(local), kPermuteSlot));
  uint8_t* rail_chunk = permuted + static_cast<size_t>(j) * chunk;
  kernels::CopyBytes(rail_chunk + static_cast<size_t>(g_me) * block, a.send, block, /*nontemporal=*/false);
  Context rail = c.Subgroup(l.Rail(j));
  CHOIR_RETURN_IF_ERROR(RingAllgatherBlocks(rail, rail_chunk, EvenBlocks(a.count * static_cast<size_t>(hosts), hosts)));
  Context host_ctx = c.Subgroup(l.hosts[static_cast<size_t>(g_me)]);
  CHOIR_RETURN_IF_ERROR(AllgatherBlocks(host_ctx, permuted, EvenBlocks(a.count * static_cast<size_t>(hosts * local), local)));
  auto* out = static_cast<uint8_t*>(a.recv);
  for (int r = 0; r < local; ++r) {
    for (int g = 0; g < hosts; ++g) {
      const int owner = l.hosts[static_cast<size_t>(g)][static_cast<size_t>(r)];
      kernels::CopyBytes(out + static_cast<size_t>(owner) * block,
                         permuted + static_cast<size_t>(r) * chunk + static_cast<size_t>(g) * block, block,
                         /*nontemporal=*/false);
    }
  }
  return Status::Ok();
}

// Broadcast: the root's host gets the data first (shared memory), then every
// rail carries one slice to the other hosts, which reassemble it inside.
Status BroadcastHier(Context& c, const OpArgs& a) {
  const Layout& l = *c.layout();
  const int me = c.rank();
  const int g_root = l.host_of[static_cast<size_t>(a.root)];
  const int g_me = l.host_of[static_cast<size_t>(me)];
  const int j = l.local_index[static_cast<size_t>(me)];
  const int rails = l.rails();
  const size_t es = c.elem_size();
  auto* buf = static_cast<uint8_t*>(a.recv);
  const auto& host = l.hosts[static_cast<size_t>(g_me)];
  Context host_ctx = c.Subgroup(host);
  if (g_me == g_root) {
    OpArgs step = a;
    step.root = l.local_index[static_cast<size_t>(a.root)];
    CHOIR_RETURN_IF_ERROR(RunStep(host_ctx, step, "intra"));
  }
  const Blocks blocks = HostBlocks(a.count, static_cast<int>(host.size()), rails);
  if (j < rails) {
    const auto& slice = blocks[static_cast<size_t>(j)];
    Context rail = c.Subgroup(l.Rail(j));
    OpArgs step = a;
    step.send = step.recv = buf + slice.offset * es;
    step.count = slice.count;
    step.root = g_root;  // the rail lists hosts in order, so the root host's member is rail rank g_root
    CHOIR_RETURN_IF_ERROR(RunStep(rail, step, "inter"));
  }
  if (g_me != g_root) CHOIR_RETURN_IF_ERROR(AllgatherBlocks(host_ctx, buf, blocks));
  return Status::Ok();
}

bool HierUsable(const GroupView& g, const OpArgs& a) {
  if (!g.multi_host() || g.layout->num_hosts() >= g.size) return false;
  if (a.kind == CollKind::kReduceScatter || a.kind == CollKind::kAllgather) return g.layout->uniform();
  if (a.kind == CollKind::kBroadcast) {
    // Every host holds a rail member for the root host's slices.
    return true;
  }
  return true;
}

}  // namespace choir::algorithms
