// Communicator::Split: ranks exchange (color, key) over the parent, then each
// color creates its own communicator through the same store.
#include <algorithm>

#include <fmt/format.h>

#include "base/strings.h"
#include "comm/comm_impl.h"

namespace choir::comm {

Result<std::unique_ptr<CommImpl>> CommImpl::Split(int color, int key, const CommOptions& options) {
  if (ForkedCopy()) return ForkedCopyError("Split");
  CHOIR_RETURN_IF_ERROR(sticky());
  CommOptions child = options;
  if (child.timeout.count() == 0) {
    child.timeout = std::chrono::milliseconds(static_cast<int64_t>(config_.timeout_seconds * 1000));
  }
  if (child.transport.empty()) child.transport = transport::TransportChoiceName(config_.transport);
  if (child.job_id.empty()) child.job_id = config_.job_id;
  if (child.host_id.empty()) child.host_id = config_.host_id;
  const int split_index = splits_++;
  child.name = config_.name + "/split" + std::to_string(split_index) + "/color" + std::to_string(color);
  // Options the child communicator would refuse are found before the
  // exchange and travel with it, so that the other members of the color fail
  // at once instead of waiting for this rank at the child's rendezvous.
  const Status usable = color < 0 ? Status::Ok() : CheckOptions(child);
  const int64_t mine[3] = {color, key, usable.ok() ? 1 : 0};
  std::vector<int64_t> all(3 * static_cast<size_t>(size_));
  algorithms::OpArgs args;
  args.kind = algorithms::CollKind::kAllgather;
  args.send = mine;
  args.recv = all.data();
  args.count = 3;
  args.dtype = DataType::kInt64;
  CHOIR_RETURN_IF_ERROR(Submit(std::move(args), CallOptions{}).Wait());
  if (color < 0) return std::unique_ptr<CommImpl>();
  if (!usable.ok()) return usable.WithContext(fmt::format("rank {}: Split(color {})", rank_, color));

  std::vector<std::pair<int64_t, int>> members;  // (key, parent rank)
  std::vector<int> refused;                       // members whose options were refused
  for (int r = 0; r < size_; ++r) {
    const auto at = 3 * static_cast<size_t>(r);
    if (all[at] != color) continue;
    members.emplace_back(all[at + 1], r);
    if (all[at + 2] == 0) refused.push_back(r);
  }
  if (!refused.empty()) {
    return Status(Code::kRemoteError,
                  fmt::format("rank {}: Split(color {}): rank(s) {} of the same color gave CommOptions or "
                              "settings that a communicator refuses (their own error names them), so the "
                              "new communicator cannot form",
                              rank_, color, strings::FormatRanks(refused)));
  }
  std::sort(members.begin(), members.end());
  const int new_rank = static_cast<int>(
      std::find_if(members.begin(), members.end(), [&](const auto& m) { return m.second == rank_; }) -
      members.begin());

  InheritedPlace inherited{topology_.ranks[static_cast<size_t>(rank_)], intra_host_cost_, inter_host_cost_,
                           topology_.source, topo_fingerprint_};
  return Create(store_, new_rank, static_cast<int>(members.size()), child, &inherited);
}

}  // namespace choir::comm
