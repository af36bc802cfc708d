#include "algorithms/layout.h"

#include <algorithm>
#include <map>

namespace choir::algorithms {

Layout Layout::FromHostNames(const std::vector<std::string>& host_of_rank) {
  Layout l;
  std::map<std::string, int> index;
  l.host_of.resize(host_of_rank.size());
  l.local_index.resize(host_of_rank.size());
  for (size_t r = 0; r < host_of_rank.size(); ++r) {
    auto [it, inserted] = index.emplace(host_of_rank[r], static_cast<int>(l.hosts.size()));
    if (inserted) l.hosts.emplace_back();
    auto& members = l.hosts[static_cast<size_t>(it->second)];
    l.host_of[r] = it->second;
    l.local_index[r] = static_cast<int>(members.size());
    members.push_back(static_cast<int>(r));
  }
  return l;
}

int Layout::rails() const {
  int m = hosts.empty() ? 0 : static_cast<int>(hosts[0].size());
  for (const auto& h : hosts) m = std::min(m, static_cast<int>(h.size()));
  return m;
}

bool Layout::uniform() const {
  for (const auto& h : hosts) {
    if (h.size() != hosts[0].size()) return false;
  }
  return true;
}

std::vector<int> Layout::Rail(int j) const {
  std::vector<int> rail;
  for (const auto& h : hosts) {
    if (static_cast<int>(h.size()) > j) rail.push_back(h[static_cast<size_t>(j)]);
  }
  return rail;
}

}  // namespace choir::algorithms
