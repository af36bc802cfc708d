// The view of one collective that an algorithm works with: its rank and size
// within the group it runs on, the transport endpoint, and helpers that build
// messages already stamped with the collective's sequence number and
// signature.
//
// A Context may cover a sub-group of the communicator (hierarchical
// algorithms compose per-host and cross-host steps): `ranks` maps group ranks
// to communicator ranks and every message keeps the parent's sequence number.
//
// Thread-safety: used by the one thread executing the operation.
#ifndef CHOIR_ALGORITHMS_CONTEXT_H_
#define CHOIR_ALGORITHMS_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "algorithms/group_view.h"
#include "algorithms/layout.h"
#include "algorithms/op.h"
#include "base/clock.h"
#include "kernels/reduce.h"
#include "transport/endpoint.h"

namespace choir::algorithms {

struct SelectConfig;
class StagingChooser;
class WalkChooser;

// Growable scratch memory owned by the communicator, reused across operations.
// Slot 0 belongs to the innermost step (block steps, rings, single copy);
// hierarchical algorithms keep their own buffers in slots 1 and 2, and cma
// its reduce's pieces or an in-place alltoallv's held blocks in slot 3
// (kCmaScratchSlot), so that no algorithm's buffer is one a step it calls
// reuses.
class Scratch {
 public:
  static constexpr int kSlots = 4;
  // At least `bytes` bytes, 64-byte aligned, valid until the next Get of the
  // same slot with a larger size; null when memory is exhausted.
  uint8_t* Get(size_t bytes, int slot = 0);
  ~Scratch();

 private:
  uint8_t* data_[kSlots] = {};
  size_t size_[kSlots] = {};
};

class Context {
 public:
  Context(transport::Endpoint& endpoint, const transport::RunHooks& hooks, uint64_t seq,
          const Signature& signature, const OpArgs& args, Scratch& scratch);
  // The same context for another call with equal arguments: its sequence
  // number and hooks (CommImpl's call plan keeps the context of a repeated
  // call instead of building it every time).
  void Renew(uint64_t seq, const transport::RunHooks& hooks) {
    seq_ = seq;
    hooks_ = &hooks;
    step_ = 0;
  }
  // A sub-group view: `ranks` lists the communicator ranks of the group in group order.
  Context Subgroup(std::vector<int> ranks) const;
  // The same view combining with `op` (hierarchical steps of an average sum,
  // and divide once at the end).
  Context WithOp(ReduceOp op) const;

  // Host layout of the whole communicator (null when unknown).
  const Layout* layout() const { return layout_; }
  void set_layout(const Layout* layout) { layout_ = layout; }
  // Link costs for the cost model (from the topology).
  void set_link_costs(LinkCost intra_host, LinkCost inter_host) {
    intra_host_ = intra_host;
    inter_host_ = inter_host;
  }
  // What selection needs to know about this group.
  GroupView View() const;
  // The same-host switch-point table of this host's ranks (the one View()
  // gives), without building the whole view. Only for a group on one host.
  // Parsed once per context: a repeated call's plan keeps its context, so
  // the small calls that ask on every call (shm_flat's flagged lines) parse
  // it once.
  SwitchTable HostSwitchTable() const;
  // Selection settings, for algorithms that choose their own sub-steps.
  const SelectConfig* select_config() const { return select_; }
  void set_select_config(const SelectConfig* config) { select_ = config; }
  // The communicator's measured choice between same-host walks (null: none;
  // walk_choice.h).
  WalkChooser* walk_chooser() const { return walk_chooser_; }
  void set_walk_chooser(WalkChooser* chooser) { walk_chooser_ = chooser; }
  // The communicator's measured store kind for the pipe's staging (null:
  // plain stores; walk_choice.h).
  StagingChooser* staging_chooser() const { return staging_chooser_; }
  void set_staging_chooser(StagingChooser* chooser) { staging_chooser_ = chooser; }

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(ranks_.empty() ? endpoint_->size() : ranks_.size()); }
  int CommRank(int group_rank) const { return ranks_.empty() ? group_rank : ranks_[static_cast<size_t>(group_rank)]; }

  DataType dtype() const { return dtype_; }
  ReduceOp op() const { return op_; }
  size_t elem_size() const { return elem_size_; }
  // Looked up when asked: the slot algorithms combine through ReduceMany and never ask.
  kernels::ReduceFn reduce() const { return kernels::GetReduceFn(dtype_, op_); }

  transport::Xfer Send(int to, const void* data, size_t bytes);
  transport::Xfer Recv(int from, void* data, size_t bytes);
  // dst = operand op incoming (operand defaults to dst).
  transport::Xfer RecvReduce(int from, void* dst, size_t bytes, const void* operand = nullptr);

  Status Run(std::span<transport::Xfer> xfers);
  Status Run(std::initializer_list<transport::Xfer> xfers);

  // Same-host support (see local_ops.h).
  transport::LocalGroup* local_group() const { return endpoint_->local(); }
  bool covers_whole_comm() const { return ranks_.empty(); }
  // Communicator ranks of this group in group order.
  std::vector<int> GroupRanks() const;
  Status WaitLocal(absl::FunctionRef<bool(int)> owes, absl::FunctionRef<std::string()> what,
                   bool marks_data = false) {
    return endpoint_->WaitLocal(owes, *hooks_, what, marks_data);
  }
  // Marks that this collective reached a peer's SharedBuffer directly (shown
  // as "+shared" after the algorithm's name).
  void NoteSharedBuffers() const { NoteRoute(transport::kRouteShared); }
  // Marks that a same-host walk took the kernel copy (walk_choice.h; shown
  // as "+cma" after the algorithm's name).
  void NoteKernelWalk() const { NoteRoute(transport::kRouteKernelWalk); }
  // Marks that a walk went through the pipe instead of its own way (shown
  // as "+pipe" after the algorithm's name).
  void NotePipeWalk() const { NoteRoute(transport::kRoutePipeWalk); }
  // A pipe walk staged with streaming stores (StagingChooser).
  void NoteStreamingStages() const { NoteRoute(transport::kRouteStreamingStages); }
  void CountSharedRead(int group_rank, uint64_t bytes) { endpoint_->CountSharedRead(CommRank(group_rank), bytes); }
  uint64_t sig_word() const { return sig_word_; }
  uint64_t sig_count() const { return sig_count_; }
  // The CollectiveMismatch for a peer whose signature differs from ours.
  Status Mismatch(uint64_t their_word, uint64_t their_count, int comm_rank) const;

  // Scratch memory for this operation (SystemError when memory is exhausted).
  Result<uint8_t*> ScratchBytes(size_t bytes, int slot = 0);

 private:
  transport::MsgHeader Header(size_t bytes);
  void NoteRoute(transport::RouteBit bit) const {
    if (hooks_->route != nullptr) *hooks_->route |= bit;
  }

  transport::Endpoint* endpoint_;
  const transport::RunHooks* hooks_;
  uint64_t seq_;
  uint64_t sig_word_;
  uint64_t sig_count_;
  DataType dtype_;
  ReduceOp op_;
  size_t elem_size_;
  Scratch* scratch_;
  const Layout* layout_ = nullptr;
  LinkCost intra_host_{1e-6, 10e9};
  LinkCost inter_host_{20e-6, 3e9};
  const SelectConfig* select_ = nullptr;
  mutable std::optional<SwitchTable> host_table_;  // HostSwitchTable(), once asked
  WalkChooser* walk_chooser_ = nullptr;
  StagingChooser* staging_chooser_ = nullptr;
  std::vector<int> ranks_;  // empty: identity over the whole communicator
  int rank_;
  uint64_t step_ = 0;
};

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_CONTEXT_H_
