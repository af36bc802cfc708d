// Algorithm selection: which algorithm runs a given operation.
//
// Default rules are a size threshold (CHOIR_SMALL_BYTES) between the
// latency-bound and the bandwidth-bound algorithm of each collective. The
// override string CHOIR_ALGO replaces them per collective and size range:
//   RULE[;RULE...]     RULE = COLLECTIVE[:MIN-MAX]:ALGORITHM
//   e.g. "allreduce:0-64K:recursive_doubling;allreduce:64K-max:ring;broadcast:binomial"
// Ranges are half-open [MIN, MAX) in bytes (K/M/G suffixes, "max" = no limit);
// the first matching rule wins. The string is parsed and validated when a
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
#include "choir/status.h"

namespace choir::algorithms {

struct SelectRule {
  CollKind kind;
  uint64_t min_bytes = 0;
  uint64_t max_bytes = UINT64_MAX;
  const Algorithm* algorithm = nullptr;
};

struct SelectConfig {
  uint64_t small_bytes = 16 * 1024;
  std::vector<SelectRule> rules;
};

// InvalidSetting naming the bad rule for a malformed string.
Result<std::vector<SelectRule>> ParseAlgoRules(std::string_view text);

// The algorithm for `args` on the group of `ctx`. `forced` (CallOptions.algorithm)
// wins over everything; an unknown or unusable forced name is InvalidArgument
// saying what exists or what the algorithm needs. Rules of CHOIR_ALGO that
// name an algorithm unusable here are skipped.
Result<const Algorithm*> SelectAlgorithm(const Context& ctx, const OpArgs& args,
                                         const SelectConfig& config, std::string_view forced);

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_SELECT_H_
