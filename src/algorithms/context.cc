#include "algorithms/context.h"

#include "algorithms/local_ops.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

namespace choir::algorithms {

uint8_t* Scratch::Get(size_t bytes, int slot) {
  uint8_t*& data = data_[slot];
  if (bytes > size_[slot]) {
    std::free(data);
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    data = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
    size_[slot] = data == nullptr ? 0 : rounded;
  }
  return data;
}

Scratch::~Scratch() {
  for (uint8_t* d : data_) std::free(d);
}

Context::Context(transport::Endpoint& endpoint, const transport::RunHooks& hooks, uint64_t seq,
                 const Signature& signature, const OpArgs& args, Scratch& scratch)
    : endpoint_(&endpoint),
      hooks_(&hooks),
      seq_(seq),
      sig_word_(signature.PackedWord()),
      sig_count_(signature.count),
      dtype_(args.dtype),
      op_(args.op),
      elem_size_(DataTypeSize(args.dtype)),
      scratch_(&scratch),
      rank_(endpoint.rank()) {}

Context Context::Subgroup(std::vector<int> ranks) const {
  Context sub = *this;
  const int me = CommRank(rank_);
  sub.rank_ = static_cast<int>(std::find(ranks.begin(), ranks.end(), me) - ranks.begin());
  sub.ranks_ = std::move(ranks);
  return sub;
}

GroupView Context::View() const {
  GroupView v;
  v.size = size();
  v.same_host = LocalGroupUsable(*this);
  v.cma = v.same_host && local_group()->cma;
  v.shares_cpus = v.same_host && local_group()->ranks_share_cpus;
  v.slot_bytes = v.same_host ? local_group()->mine().slot_bytes() : 0;
  v.pipe_bytes = v.same_host ? local_group()->mine().pipe_bytes() : 0;
  v.pipe_cache_bytes = v.same_host ? local_group()->pipe_cache_bytes : 0;
  if (v.same_host) v.switch_table = HostSwitchTable();
  v.layout = covers_whole_comm() ? layout_ : nullptr;
  v.intra_host = intra_host_;
  v.inter_host = inter_host_;
  return v;
}

SwitchTable Context::HostSwitchTable() const {
  if (!host_table_) host_table_ = ParseSwitchTable(local_group()->tuning).value_or(SwitchTable::kIntel);
  return *host_table_;
}

Context Context::WithOp(ReduceOp op) const {
  Context c = *this;
  c.op_ = op;
  return c;
}

std::vector<int> Context::GroupRanks() const {
  if (!ranks_.empty()) return ranks_;
  std::vector<int> all(static_cast<size_t>(endpoint_->size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return all;
}

transport::MsgHeader Context::Header(size_t bytes) {
  transport::MsgHeader h;
  h.kind = static_cast<uint32_t>(transport::MsgKind::kCollective);
  h.seq = seq_;
  h.sig = sig_word_;
  h.count = sig_count_;
  h.length = bytes;
  h.aux = step_++;
  return h;
}

transport::Xfer Context::Send(int to, const void* data, size_t bytes) {
  return transport::Xfer::Send(CommRank(to), Header(bytes), data);
}

transport::Xfer Context::Recv(int from, void* data, size_t bytes) {
  return transport::Xfer::Recv(CommRank(from), Header(bytes), data);
}

transport::Xfer Context::RecvReduce(int from, void* dst, size_t bytes, const void* operand) {
  return transport::Xfer::RecvReduce(CommRank(from), Header(bytes), dst, reduce(), elem_size_, operand);
}

Status Context::Mismatch(uint64_t their_word, uint64_t their_count, int comm_rank) const {
  transport::MsgHeader expected;
  expected.kind = static_cast<uint32_t>(transport::MsgKind::kCollective);
  expected.seq = seq_;
  expected.sig = sig_word_;
  expected.count = sig_count_;
  transport::MsgHeader got = expected;
  got.sig = their_word;
  got.count = their_count;
  if (hooks_->observer) return hooks_->observer->Mismatch(expected, got, comm_rank);
  return Status(Code::kCollectiveMismatch, "rank " + std::to_string(comm_rank) + " runs another collective");
}

Result<uint8_t*> Context::ScratchBytes(size_t bytes, int slot) {
  uint8_t* p = scratch_->Get(std::max<size_t>(bytes, 64), slot);
  if (p == nullptr) {
    return Status(Code::kSystemError, "cannot allocate " + std::to_string(bytes) +
                                          " bytes of scratch memory for the collective");
  }
  return p;
}

Status Context::Run(std::span<transport::Xfer> xfers) { return endpoint_->Run(xfers, *hooks_); }

Status Context::Run(std::initializer_list<transport::Xfer> xfers) {
  std::vector<transport::Xfer> v(xfers);
  return endpoint_->Run(v, *hooks_);
}

}  // namespace choir::algorithms
