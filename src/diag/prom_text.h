// Building, parsing and merging Prometheus text exposition (format 0.0.4).
//
// `choir exporter` serves one document made of its own host metrics and the
// /metrics documents of every choir process on the host. Each process
// declares the same families (HELP and TYPE lines), and a family must appear
// only once in a valid document, so the exporter parses each source into
// families and renders every family once with all its samples.
//
// Thread-safety: values; a FamilySet is not synchronized.
#ifndef CHOIR_DIAG_PROM_TEXT_H_
#define CHOIR_DIAG_PROM_TEXT_H_

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "choir/status.h"

namespace choir::diag {

struct MetricFamily {
  std::string name;
  std::string type = "untyped";  // counter, gauge, histogram, summary, untyped
  std::string help;
  std::vector<std::string> samples;  // whole sample lines without the newline
};

// `name{k="v",...} value` with label values escaped; labels may be empty.
std::string FormatSample(std::string_view name,
                         const std::vector<std::pair<std::string, std::string>>& labels,
                         double value);
std::string EscapeLabelValue(std::string_view value);

// Parses a document. InvalidArgument naming the line for anything that is
// not a comment, a blank line or a well-formed sample (so a document cut off
// mid-line by a dying target is rejected whole rather than half-merged).
Result<std::vector<MetricFamily>> ParsePrometheusText(std::string_view text);

// Families by name, in order of first appearance.
class FamilySet {
 public:
  // Adds `family`'s samples to the family of the same name (created if new).
  // A family whose type conflicts with the one already present is dropped;
  // returns false then.
  bool Add(MetricFamily family);
  void AddAll(std::vector<MetricFamily> families);
  // Every family once: HELP, TYPE, samples. Families without samples are kept
  // (HELP and TYPE only) so that dashboards see the family exists.
  std::string Render() const;

 private:
  std::vector<MetricFamily> families_;
  std::map<std::string, size_t> index_;
};

}  // namespace choir::diag

#endif  // CHOIR_DIAG_PROM_TEXT_H_
