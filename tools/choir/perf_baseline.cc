#include "perf_baseline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace choir::cli {
namespace {

using json = nlohmann::json;

Status Refuse(const std::string& path, const std::string& why) {
  return Status(Code::kUsageError, fmt::format("--baseline {}: {}; give a file written by `choir perf --json` "
                                               "from a run of the same shape",
                                               path, why));
}

// Checks one row and returns it; `i` numbers it in messages.
Result<BaselineRow> ReadRow(const std::string& path, const json& r, size_t i) {
  const std::string where = fmt::format("results[{}]", i);
  if (!r.is_object()) return Refuse(path, where + " is not an object");
  BaselineRow row;
  if (!r.contains("op") || !r["op"].is_string()) return Refuse(path, where + ".op is missing or not a string");
  row.op = r["op"].get<std::string>();
  if (!r.contains("bytes") || !r["bytes"].is_number_unsigned()) {
    return Refuse(path, where + ".bytes is missing or not a whole number of bytes");
  }
  row.bytes = r["bytes"].get<uint64_t>();
  if (!r.contains("busbw_median") || !r["busbw_median"].is_number() || r["busbw_median"].get<double>() < 0) {
    return Refuse(path, where + ".busbw_median is missing or not a number >= 0");
  }
  row.busbw_median = r["busbw_median"].get<double>();
  if (r.contains("busbw_spread")) {
    if (!r["busbw_spread"].is_number() || r["busbw_spread"].get<double>() < 0) {
      return Refuse(path, where + ".busbw_spread is not a number >= 0");
    }
    row.busbw_spread = r["busbw_spread"].get<double>();
  }
  return row;
}

// "float32" when `field` of row `r` is a string, else "".
std::string StringField(const json& r, const char* field) {
  return r.contains(field) && r[field].is_string() ? r[field].get<std::string>() : "";
}

}  // namespace

bool PerfOpReduces(const std::string& op) { return op == "allreduce" || op == "reduce_scatter" || op == "reduce"; }

const BaselineRow* Baseline::Find(const std::string& op, const std::string& dtype, const std::string& reduce_op,
                                  uint64_t bytes) const {
  const bool reduces = PerfOpReduces(op);
  for (const BaselineRow& r : rows) {
    if (r.op != op || r.bytes != bytes) continue;
    if (!r.dtype.empty() && r.dtype != dtype) continue;
    if (reduces && !r.reduce_op.empty() && r.reduce_op != reduce_op) continue;
    return &r;
  }
  return nullptr;
}

Result<Baseline> LoadBaseline(const std::string& path, const PerfRunShape& run) {
  const int ranks = run.ranks;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return Refuse(path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Refuse(path, "not a regular file");
  std::ifstream in(path);
  if (!in) return Status(Code::kUsageError, fmt::format("--baseline {}: cannot be read", path));
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Refuse(path, "not JSON (or cut short)");
  if (!doc.is_object() || !doc.contains("results") || !doc["results"].is_array()) {
    return Refuse(path, "no \"results\" list");
  }
  Baseline b;
  b.path = path;
  constexpr int64_t kMostRanks = int64_t{1} << 24;
  if (!doc.contains("ranks") || !doc["ranks"].is_number_integer() || doc["ranks"].get<int64_t>() < 1 ||
      doc["ranks"].get<int64_t>() > kMostRanks) {
    return Refuse(path, fmt::format("\"ranks\" is missing or not a whole number from 1 to {}", kMostRanks));
  }
  b.ranks = static_cast<int>(doc["ranks"].get<int64_t>());
  b.buffers = doc.contains("buffers") && doc["buffers"].is_string() ? doc["buffers"].get<std::string>() : "heap";
  b.buffer_offset = doc.contains("buffer_offset") && doc["buffer_offset"].is_number_integer()
                        ? doc["buffer_offset"].get<int64_t>()
                        : 0;
  b.in_place = doc.contains("in_place") && doc["in_place"].is_boolean() && doc["in_place"].get<bool>();
  b.launch_warmup_calls = doc.contains("launch_warmup_calls") && doc["launch_warmup_calls"].is_number_integer()
                              ? doc["launch_warmup_calls"].get<int64_t>()
                              : 0;
  if (doc.contains("repeat")) {
    const json& r = doc["repeat"];
    // Integers beyond int64_t's range arrive unsigned; any count that large
    // is as good as INT32_MAX here.
    const bool positive = r.is_number_unsigned() ? r.get<uint64_t>() >= 1
                                                 : r.is_number_integer() && r.get<int64_t>() >= 1;
    if (!positive) return Refuse(path, "\"repeat\" is not an integer from 1");
    b.repeat = r.is_number_unsigned() ? static_cast<int>(std::min<uint64_t>(r.get<uint64_t>(), INT32_MAX))
                                      : static_cast<int>(std::min<int64_t>(r.get<int64_t>(), INT32_MAX));
  }
  // Files from before the root was recorded have none.
  if (doc.contains("root") && doc["root"].is_number_integer() && doc["root"].get<int64_t>() >= 0 &&
      doc["root"].get<int64_t>() < b.ranks) {
    b.root = static_cast<int>(doc["root"].get<int64_t>());
  }
  if (ranks > 0 && b.ranks != ranks) {
    return Refuse(path, fmt::format("measured with {} ranks, this run has {}", b.ranks, ranks));
  }
  const json& results = doc["results"];
  // The types of the baseline's rows of the run's ops, and the reduce ops
  // of those that reduce, in file order.
  std::vector<std::string> row_dtypes, row_rops;
  auto note = [](std::vector<std::string>& seen, const std::string& name) {
    if (!name.empty() && std::find(seen.begin(), seen.end(), name) == seen.end()) seen.push_back(name);
  };
  auto any_of = [](const std::vector<std::string>& seen, const std::vector<std::string>& wanted) {
    return std::any_of(seen.begin(), seen.end(), [&](const std::string& name) {
      return std::find(wanted.begin(), wanted.end(), name) != wanted.end();
    });
  };
  for (size_t i = 0; i < results.size(); ++i) {
    CHOIR_ASSIGN_OR_RETURN(BaselineRow row, ReadRow(path, results[i], i));
    const json& r = results[i];
    const bool reduces = PerfOpReduces(row.op);
    row.dtype = StringField(r, "dtype");
    row.reduce_op = reduces ? StringField(r, "reduce_op") : "";
    if (std::find(run.ops.begin(), run.ops.end(), row.op) != run.ops.end()) {
      // A row that does not say would be compared with every table of the run.
      if (row.dtype.empty() && run.dtypes.size() > 1) {
        return Refuse(path, fmt::format("results[{}] has no dtype, and this run measures several (--dtype {})", i,
                                        fmt::join(run.dtypes, ",")));
      }
      if (reduces && row.reduce_op.empty() && run.reduce_ops.size() > 1) {
        return Refuse(path, fmt::format("results[{}] has no reduce_op, and this run measures several "
                                        "(--reduce-op {})",
                                        i, fmt::join(run.reduce_ops, ",")));
      }
      note(row_dtypes, row.dtype);
      note(row_rops, row.reduce_op);
    }
    b.rows.push_back(std::move(row));
  }
  if (!row_dtypes.empty() && !any_of(row_dtypes, run.dtypes)) {
    return Refuse(path, fmt::format("measured {}, this run measures {} (--dtype)", fmt::join(row_dtypes, ","),
                                    fmt::join(run.dtypes, ",")));
  }
  if (!row_rops.empty() && !any_of(row_rops, run.reduce_ops)) {
    return Refuse(path, fmt::format("measured reduce-op {}, this run {} (--reduce-op)", fmt::join(row_rops, ","),
                                    fmt::join(run.reduce_ops, ",")));
  }
  return b;
}

}  // namespace choir::cli
