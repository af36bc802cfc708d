// Communicator::Split: ranks exchange (color, key) over the parent, then each
// color creates its own communicator through the same store.
#include <algorithm>

#include "comm/comm_impl.h"

namespace choir::comm {

Result<std::unique_ptr<CommImpl>> CommImpl::Split(int color, int key, const CommOptions& options) {
  CHOIR_RETURN_IF_ERROR(sticky());
  const int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size_));
  algorithms::OpArgs args;
  args.kind = algorithms::CollKind::kAllgather;
  args.send = mine;
  args.recv = all.data();
  args.count = 2;
  args.dtype = DataType::kInt64;
  CHOIR_RETURN_IF_ERROR(Submit(std::move(args), CallOptions{}).Wait());
  const int split_index = splits_++;
  if (color < 0) return std::unique_ptr<CommImpl>();

  std::vector<std::pair<int64_t, int>> members;  // (key, parent rank)
  for (int r = 0; r < size_; ++r) {
    if (all[2 * static_cast<size_t>(r)] == color) members.emplace_back(all[2 * static_cast<size_t>(r) + 1], r);
  }
  std::sort(members.begin(), members.end());
  const int new_rank = static_cast<int>(
      std::find_if(members.begin(), members.end(), [&](const auto& m) { return m.second == rank_; }) -
      members.begin());

  CommOptions child = options;
  child.name = config_.name + "/split" + std::to_string(split_index) + "/color" + std::to_string(color);
  if (child.timeout.count() == 0) {
    child.timeout = std::chrono::milliseconds(static_cast<int64_t>(config_.timeout_seconds * 1000));
  }
  if (child.transport.empty()) child.transport = transport::TransportChoiceName(config_.transport);
  if (child.job_id.empty()) child.job_id = config_.job_id;
  if (child.host_id.empty()) child.host_id = config_.host_id;
  InheritedPlace inherited{topology_.ranks[static_cast<size_t>(rank_)], intra_host_cost_, inter_host_cost_,
                           topology_.source, topo_fingerprint_};
  return Create(store_, new_rank, static_cast<int>(members.size()), child, &inherited);
}

}  // namespace choir::comm
