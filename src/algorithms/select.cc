#include "algorithms/select.h"

#include <fmt/format.h>

#include <limits>

#include "algorithms/switch_points.h"
#include "base/strings.h"

namespace choir::algorithms {
namespace {

std::string NamesFor(CollKind kind) {
  std::string names;
  for (const Algorithm* a : AlgorithmsFor(kind)) {
    if (!names.empty()) names += ", ";
    names += a->name;
  }
  return names;
}

Status BadRule(std::string_view rule, const std::string& why) {
  return Status(Code::kInvalidSetting, "CHOIR_ALGO rule '" + std::string(rule) + "': " + why +
                                           " (format: COLLECTIVE[@intra|@inter][:MIN-MAX]:ALGORITHM;...)");
}

bool Usable(const Algorithm& a, const GroupView& g, const OpArgs& args) {
  return a.usable == nullptr || a.usable(g, args);
}

const Algorithm* DefaultFor(const GroupView& g, const OpArgs& args, uint64_t bytes,
                            const SelectConfig& config, bool substep, std::string* why) {
  const std::vector<const Algorithm*>& candidates = AlgorithmsFor(args.kind);
  // One host: the shared area, at the switch points measured for this host.
  if (const Algorithm* a = SameHostChoice(g, args)) {
    if (why) *why = fmt::format("all ranks on one host ({} switch points)", SwitchTableName(g.switch_table));
    return a;
  }
  // Several hosts: the cheapest by the cost model.
  if (g.multi_host()) {
    const Algorithm* best = nullptr;
    double best_cost = std::numeric_limits<double>::infinity();
    std::string table;
    for (const Algorithm* a : candidates) {
      if (a->predict == nullptr || !Usable(*a, g, args)) continue;
      if (substep && IsHierarchical(*a)) continue;
      const double t = a->predict(g, args);
      if (why) table += fmt::format("{}{} {:.3g}s", table.empty() ? "" : ", ", a->name, t);
      if (t < best_cost) {
        best_cost = t;
        best = a;
      }
    }
    if (best != nullptr) {
      if (why) *why = "cost model: " + table;
      return best;
    }
  }
  if (args.kind == CollKind::kAllreduce) {
    if (why) *why = bytes <= config.small_bytes ? "small message" : "large message";
    return FindAlgorithm(args.kind, bytes <= config.small_bytes ? "recursive_doubling" : "ring");
  }
  for (const Algorithm* a : candidates) {
    if (a->usable == nullptr) {
      if (why) *why = "default";
      return a;
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
    std::string coll(strings::Trim(parts[0]));
    if (const size_t at = coll.find('@'); at != std::string::npos) {
      r.level = coll.substr(at + 1);
      coll = coll.substr(0, at);
      if (r.level != "intra" && r.level != "inter") {
        return BadRule(rule, "unknown level '" + r.level + "' (intra or inter)");
      }
    }
    if (!ParseCollKind(coll, &r.kind)) return BadRule(rule, "unknown collective '" + coll + "'");
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
    if (!r.level.empty() && IsHierarchical(*r.algorithm)) {
      return BadRule(rule, "a level rule cannot pick the hierarchical algorithm itself");
    }
    rules.push_back(r);
  }
  return rules;
}

Result<const Algorithm*> SelectAlgorithm(const GroupView& group, const OpArgs& args,
                                         const SelectConfig& config, std::string_view forced,
                                         std::string_view level, std::string* why) {
  if (!forced.empty() && level.empty()) {
    const Algorithm* a = FindAlgorithm(args.kind, forced);
    if (a == nullptr) {
      return InvalidArgument("no algorithm '" + std::string(forced) + "' for " +
                             CollKindName(args.kind) + "; available: " + NamesFor(args.kind));
    }
    if (!Usable(*a, group, args)) {
      return InvalidArgument("algorithm '" + std::string(forced) + "' cannot run this " +
                             CollKindName(args.kind) + ": it needs " + a->needs);
    }
    if (why) *why = "forced by the caller";
    return a;
  }
  const uint64_t bytes = args.SelectionBytes(group.size);
  for (const SelectRule& r : config.rules) {
    if (r.kind == args.kind && r.level == level && bytes >= r.min_bytes && bytes < r.max_bytes &&
        Usable(*r.algorithm, group, args)) {
      if (why) *why = "CHOIR_ALGO rule";
      return r.algorithm;
    }
  }
  const Algorithm* a = DefaultFor(group, args, bytes, config, !level.empty(), why);
  if (a == nullptr) return InternalError(std::string("no algorithm for ") + CollKindName(args.kind));
  return a;
}

}  // namespace choir::algorithms
