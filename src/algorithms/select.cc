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

bool Usable(const Algorithm& a, const Context& ctx, const OpArgs& args) {
  return a.usable == nullptr || a.usable(ctx, args);
}

// The default choice: the host's shared area when the group is one host
// (slots for small payloads, single copy for large), otherwise the
// latency-bound algorithm for small messages and the bandwidth-bound one for
// large.
const Algorithm* DefaultFor(const Context& ctx, const OpArgs& args, uint64_t bytes,
                            const SelectConfig& config) {
  for (const Algorithm& a : AllAlgorithms()) {
    if (a.kind == args.kind && a.usable != nullptr && a.usable(ctx, args)) return &a;
  }
  if (args.kind == CollKind::kAllreduce) {
    return FindAlgorithm(args.kind, bytes <= config.small_bytes ? "recursive_doubling" : "ring");
  }
  for (const Algorithm& a : AllAlgorithms()) {
    if (a.kind == args.kind && a.usable == nullptr) return &a;
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

Result<const Algorithm*> SelectAlgorithm(const Context& ctx, const OpArgs& args,
                                         const SelectConfig& config, std::string_view forced) {
  if (!forced.empty()) {
    const Algorithm* a = FindAlgorithm(args.kind, forced);
    if (a == nullptr) {
      return InvalidArgument("no algorithm '" + std::string(forced) + "' for " +
                             CollKindName(args.kind) + "; available: " + NamesFor(args.kind));
    }
    if (!Usable(*a, ctx, args)) {
      return InvalidArgument("algorithm '" + std::string(forced) + "' cannot run this " +
                             CollKindName(args.kind) + ": it needs " + a->needs);
    }
    return a;
  }
  const uint64_t bytes = args.SelectionBytes(ctx.size());
  for (const SelectRule& r : config.rules) {
    if (r.kind == args.kind && bytes >= r.min_bytes && bytes < r.max_bytes && Usable(*r.algorithm, ctx, args)) {
      return r.algorithm;
    }
  }
  const Algorithm* a = DefaultFor(ctx, args, bytes, config);
  if (a == nullptr) return InternalError(std::string("no algorithm for ") + CollKindName(args.kind));
  return a;
}

}  // namespace choir::algorithms
