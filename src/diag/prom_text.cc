#include "diag/prom_text.h"

#include <fmt/format.h>

#include <cmath>

namespace choir::diag {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// Length of the metric name at the start of `line` (0 if none).
size_t NameLength(std::string_view line) {
  if (line.empty() || !IsNameStart(line[0])) return 0;
  size_t i = 1;
  while (i < line.size() && IsNameChar(line[i])) ++i;
  return i;
}

// Checks `{k="v",...}` starting at line[pos]; returns the position after it or npos.
size_t SkipLabels(std::string_view line, size_t pos) {
  if (pos >= line.size() || line[pos] != '{') return pos;
  ++pos;
  while (pos < line.size() && line[pos] != '}') {
    const size_t name = NameLength(line.substr(pos));
    if (name == 0) return std::string_view::npos;
    pos += name;
    if (pos + 1 >= line.size() || line[pos] != '=' || line[pos + 1] != '"')
      return std::string_view::npos;
    pos += 2;
    while (pos < line.size() && line[pos] != '"') pos += line[pos] == '\\' ? 2 : 1;
    if (pos >= line.size()) return std::string_view::npos;
    ++pos;  // closing quote
    if (pos < line.size() && line[pos] == ',') ++pos;
  }
  return pos < line.size() ? pos + 1 : std::string_view::npos;
}

bool IsValue(std::string_view v) {
  if (v == "+Inf" || v == "-Inf" || v == "NaN") return true;
  if (v.empty()) return false;
  char* end = nullptr;
  const std::string s(v);
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// "choir_x_bucket" belongs to histogram family "choir_x".
bool BelongsTo(std::string_view sample, const MetricFamily& family) {
  if (sample == family.name) return true;
  if (family.type != "histogram" && family.type != "summary") return false;
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (sample.size() == family.name.size() + suffix.size() &&
        sample.substr(0, family.name.size()) == family.name &&
        sample.substr(family.name.size()) == suffix) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatSample(std::string_view name,
                         const std::vector<std::pair<std::string, std::string>>& labels,
                         double value) {
  std::string out(name);
  if (!labels.empty()) {
    out += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out += ',';
      out += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
    }
    out += '}';
  }
  if (std::isnan(value)) {
    out += " NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? " +Inf" : " -Inf";
  } else if (value == std::floor(value) && std::fabs(value) < 1e15) {
    out += fmt::format(" {}", static_cast<int64_t>(value));
  } else {
    out += fmt::format(" {:.10g}", value);
  }
  return out;
}

Result<std::vector<MetricFamily>> ParsePrometheusText(std::string_view text) {
  std::vector<MetricFamily> families;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) {
      // The format ends every line with '\n': a missing one means a cut-off document.
      return InvalidArgument(
          fmt::format("line {} has no end of line (document cut off?)", line_no + 1));
    }
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;
    if (line[0] == '#') {
      // "# HELP name text" / "# TYPE name type"; other comments are ignored.
      const bool help = line.substr(0, 7) == "# HELP ";
      const bool type = line.substr(0, 7) == "# TYPE ";
      if (!help && !type) continue;
      const std::string_view rest = line.substr(7);
      const size_t name_len = NameLength(rest);
      if (name_len == 0) return InvalidArgument(fmt::format("line {}: bad metric name", line_no));
      const std::string name(rest.substr(0, name_len));
      const std::string value(rest.size() > name_len + 1 ? rest.substr(name_len + 1)
                                                         : std::string_view());
      if (families.empty() || families.back().name != name) {
        families.push_back(MetricFamily{name, "untyped", "", {}});
      }
      if (help) families.back().help = value;
      if (type) families.back().type = value;
      continue;
    }
    const size_t name_len = NameLength(line);
    if (name_len == 0) return InvalidArgument(fmt::format("line {}: bad metric name", line_no));
    const size_t after = SkipLabels(line, name_len);
    if (after == std::string_view::npos || after >= line.size() || line[after] != ' ') {
      return InvalidArgument(fmt::format("line {}: malformed sample", line_no));
    }
    std::string_view value = line.substr(after + 1);
    const size_t space = value.find(' ');  // an optional timestamp follows
    if (!IsValue(value.substr(0, space))) {
      return InvalidArgument(fmt::format("line {}: bad sample value", line_no));
    }
    const std::string_view sample_name = line.substr(0, name_len);
    if (families.empty() || !BelongsTo(sample_name, families.back())) {
      families.push_back(MetricFamily{std::string(sample_name), "untyped", "", {}});
    }
    families.back().samples.emplace_back(line);
  }
  return families;
}

bool FamilySet::Add(MetricFamily family) {
  auto it = index_.find(family.name);
  if (it == index_.end()) {
    index_.emplace(family.name, families_.size());
    families_.push_back(std::move(family));
    return true;
  }
  MetricFamily& existing = families_[it->second];
  if (existing.type != family.type) return false;
  if (existing.help.empty()) existing.help = std::move(family.help);
  for (std::string& s : family.samples) existing.samples.push_back(std::move(s));
  return true;
}

void FamilySet::AddAll(std::vector<MetricFamily> families) {
  for (MetricFamily& f : families) Add(std::move(f));
}

std::string FamilySet::Render() const {
  std::string out;
  for (const MetricFamily& f : families_) {
    if (!f.help.empty()) out += "# HELP " + f.name + " " + f.help + "\n";
    out += "# TYPE " + f.name + " " + f.type + "\n";
    for (const std::string& s : f.samples) out += s + "\n";
  }
  return out;
}

}  // namespace choir::diag
