// Algorithm selection: which algorithm runs a given operation.
//
// Defaults: on one host, the host's shared area (shared slots for payloads
// that fit, single copy for larger ones) when available; across hosts, the
// cheapest algorithm by the cost model (cost.cc: latency + bytes/bandwidth of
// each level, with links shared by the ranks of a host); otherwise a size
// threshold (CHOIR_SMALL_BYTES) between latency- and bandwidth-bound ones.
//
// The override string CHOIR_ALGO replaces the defaults per collective, per
// level and per size range:
//   RULE[;RULE...]   RULE = COLLECTIVE[@LEVEL][:MIN-MAX]:ALGORITHM
//   LEVEL = intra (steps inside a host) | inter (steps between hosts)
//   e.g. "allreduce:0-64K:recursive_doubling;allreduce:64K-max:hier;allreduce@inter:ring"
// Ranges are half-open [MIN, MAX) in bytes (K/M/G suffixes, "max" = no limit);
// the first matching rule wins; rules naming an algorithm that cannot run on
// the group are skipped. The string is parsed and validated when a
// communicator is created, so a typo fails at start-up, not mid-training.
//
// Thread-safety: a SelectConfig is immutable after parsing.
#ifndef CHOIR_ALGORITHMS_SELECT_H_
#define CHOIR_ALGORITHMS_SELECT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/group_view.h"
#include "choir/status.h"

namespace choir::algorithms {

struct SelectRule {
  CollKind kind;
  std::string level;  // "", "intra" or "inter"
  uint64_t min_bytes = 0;
  uint64_t max_bytes = UINT64_MAX;
  const Algorithm* algorithm = nullptr;
};

struct SelectConfig {
  uint64_t small_bytes = 16 * 1024;
  // CHOIR_SHM_ADAPT: same-host copy collectives time their walks and take
  // the faster (walk_choice.h); false (default) keeps the switch points'
  // choice.
  bool adapt_walks = false;
  // CHOIR_SHM_STAGING: how the pipe walks stage their chunks; kAuto measures
  // both store kinds while the job runs (walk_choice.h, StagingChooser).
  enum class Staging { kAuto, kPlain, kStreaming };
  Staging staging = Staging::kAuto;
  std::vector<SelectRule> rules;
};

// InvalidSetting naming the bad rule for a malformed string.
Result<std::vector<SelectRule>> ParseAlgoRules(std::string_view text);

// The algorithm for `args` on `group`. `forced` (CallOptions.algorithm) wins
// over everything; an unknown or unusable forced name is InvalidArgument
// saying what exists or what the algorithm needs. `level` selects sub-steps
// of a hierarchical algorithm ("intra", "inter"; "" for the whole
// collective). `why`, if given, receives a one-line reason.
Result<const Algorithm*> SelectAlgorithm(const GroupView& group, const OpArgs& args,
                                         const SelectConfig& config, std::string_view forced,
                                         std::string_view level = "", std::string* why = nullptr);

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_SELECT_H_
