// How the ranks of a communicator sit on hosts: the shape the hierarchical
// algorithms and the cost model work with. Built from the topology (detected
// host ids or the topology file) when the communicator is created; identical
// on every rank.
//
// Thread-safety: immutable after construction.
#ifndef CHOIR_ALGORITHMS_LAYOUT_H_
#define CHOIR_ALGORITHMS_LAYOUT_H_

#include <string>
#include <vector>

namespace choir::algorithms {

struct Layout {
  std::vector<std::vector<int>> hosts;  // communicator ranks per host, ascending; hosts by lowest rank
  std::vector<int> host_of;             // host index of each rank
  std::vector<int> local_index;         // position of each rank within its host

  // Groups ranks by host name (one entry per rank).
  static Layout FromHostNames(const std::vector<std::string>& host_of_rank);

  int world() const { return static_cast<int>(host_of.size()); }
  int num_hosts() const { return static_cast<int>(hosts.size()); }
  // Smallest number of ranks on any host: the number of rails.
  int rails() const;
  bool uniform() const;  // every host has the same number of ranks
  // Rail j: the rank with local index j on every host (hosts in order).
  std::vector<int> Rail(int j) const;
};

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_LAYOUT_H_
