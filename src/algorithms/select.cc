#include "algorithms/select.h"

#include "base/strings.h"

namespace choir::algorithms {
namespace {

std::string NamesFor(CollKind kind) {
  std::string names;
  for (const Algorithm& a : AllAlgorithms()) {
    if (a.kind != kind) continue;
    if (!names.empty()) names += ", ";
    names += a.name;
  }
  return names;
}

Status BadRule(std::string_view rule, const std::string& why) {
  return Status(Code::kInvalidSetting, "CHOIR_ALGO rule '" + std::string(rule) + "': " + why +
                                           " (format: COLLECTIVE[:MIN-MAX]:ALGORITHM;...)");
}

// The default choice: latency-bound algorithm for small messages.
const Algorithm* DefaultFor(CollKind kind, uint64_t bytes, const SelectConfig& config) {
  const bool small = bytes <= config.small_bytes;
  switch (kind) {
    case CollKind::kAllreduce:
      return FindAlgorithm(kind, small ? "recursive_doubling" : "ring");
    default:
      for (const Algorithm& a : AllAlgorithms()) {
        if (a.kind == kind) return &a;
      }
  }
  return nullptr;
}

}  // namespace

Result<std::vector<SelectRule>> ParseAlgoRules(std::string_view text) {
  std::vector<SelectRule> rules;
  for (const std::string& raw : strings::Split(text, ';')) {
    const std::string_view rule = strings::Trim(raw);
    if (rule.empty()) continue;
    const std::vector<std::string> parts = strings::Split(rule, ':');
    if (parts.size() != 2 && parts.size() != 3) return BadRule(rule, "expected 2 or 3 fields");
    SelectRule r;
    if (!ParseCollKind(std::string(strings::Trim(parts[0])), &r.kind)) {
      return BadRule(rule, "unknown collective '" + parts[0] + "'");
    }
    if (parts.size() == 3) {
      const std::vector<std::string> range = strings::Split(parts[1], '-');
      if (range.size() != 2) return BadRule(rule, "range must be MIN-MAX");
      const auto lo = strings::ParseBytes(range[0]);
      const bool hi_max = strings::ToLower(strings::Trim(range[1])) == "max";
      const auto hi = hi_max ? std::optional<uint64_t>(UINT64_MAX) : strings::ParseBytes(range[1]);
      if (!lo || !hi || *lo >= *hi) return BadRule(rule, "bad size range '" + parts[1] + "'");
      r.min_bytes = *lo;
      r.max_bytes = *hi;
    }
    const std::string name(strings::Trim(parts.back()));
    r.algorithm = FindAlgorithm(r.kind, name);
    if (r.algorithm == nullptr) {
      return BadRule(rule, "no algorithm '" + name + "' for " + CollKindName(r.kind) +
                               "; available: " + NamesFor(r.kind));
    }
    rules.push_back(r);
  }
  return rules;
}

Result<const Algorithm*> SelectAlgorithm(const OpArgs& args, int world, const SelectConfig& config,
                                         std::string_view forced) {
  if (!forced.empty()) {
    const Algorithm* a = FindAlgorithm(args.kind, forced);
    if (a == nullptr) {
      return InvalidArgument("no algorithm '" + std::string(forced) + "' for " +
                             CollKindName(args.kind) + "; available: " + NamesFor(args.kind));
    }
    return a;
  }
  const uint64_t bytes = args.SelectionBytes(world);
  for (const SelectRule& r : config.rules) {
    if (r.kind == args.kind && bytes >= r.min_bytes && bytes < r.max_bytes) return r.algorithm;
  }
  const Algorithm* a = DefaultFor(args.kind, bytes, config);
  if (a == nullptr) return InternalError(std::string("no algorithm for ") + CollKindName(args.kind));
  return a;
}

}  // namespace choir::algorithms
