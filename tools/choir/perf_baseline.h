// `choir perf --baseline FILE`: an earlier `--json` run, checked before
// anything runs, and the rows a new run is compared with.
//
// A baseline is refused, with a numbered usage error that names the file and
// what is wrong, when it is not a `choir perf --json` document, when a row
// lacks a field the comparison reads, when it was measured with another
// number of ranks, or when none of its rows of the run's ops has an
// element type (or, among its reductions, a reduce op) the run measures:
// such a comparison would report differences that are not changes of
// speed. A run of several types
// or reduce ops (--dtype and --reduce-op lists) compares each row with the
// baseline row of the same op, type, reduce op and size.
//
// Thread-safety: none needed (the CLI's main thread).
#ifndef CHOIR_TOOLS_CHOIR_PERF_BASELINE_H_
#define CHOIR_TOOLS_CHOIR_PERF_BASELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "choir/status.h"

namespace choir::cli {

// A change of speed is judged only when the baseline and the run compared
// with it both measured each size at least this many times (--repeat), and
// counts only beyond the larger of their spreads: one repeat gives no spread
// at all, two give one that a single slow launch decides.
inline constexpr int kMinRepeatsForVerdict = 3;

struct BaselineRow {
  std::string op;
  std::string dtype;      // "" when the file does not say (matches any)
  std::string reduce_op;  // "" for ops that do not reduce, or when the file does not say
  uint64_t bytes = 0;
  double busbw_median = 0;  // GB/s
  double busbw_spread = 0;  // (max - min) / median of the run's repeats; 0 for one repeat
};

struct Baseline {
  std::string path;
  int ranks = 0;
  std::string buffers;  // "heap" or "shared"
  int64_t buffer_offset = 0;  // heap buffers' bytes past a page (--buffer-offset; read as 0 when absent)
  bool in_place = false;  // timed in place (--in-place; read as false when absent: files before it)
  int64_t launch_warmup_calls = 0;  // untimed calls before the first size (0 when absent: files before them)
  int root = -1;        // root of broadcast, reduce, gather and scatter; -1 when the file does not say
  int repeat = 0;       // times each size was measured (--repeat); 0 when the file does not say
  std::vector<BaselineRow> rows;

  // The row measured for `op` with `dtype` and `reduce_op` (ignored for
  // ops that do not reduce) at `bytes`, or nullptr.
  const BaselineRow* Find(const std::string& op, const std::string& dtype, const std::string& reduce_op,
                          uint64_t bytes) const;
};

// Whether `op` (a `choir perf --op` name) combines its inputs with a reduce op.
bool PerfOpReduces(const std::string& op);

// What a run measures, as its --json file names it: the ops, their types,
// and the reduce ops of those that reduce.
struct PerfRunShape {
  int ranks = 0;  // 0: not known yet
  std::vector<std::string> ops, dtypes, reduce_ops;
};

// Reads and checks `path` against the run `run`. Only the file's rows of
// the run's ops decide whether it shares a type and a reduce op with the
// run; a row without a type (or, of an op that reduces, without a reduce
// op) is refused when the run measures several.
Result<Baseline> LoadBaseline(const std::string& path, const PerfRunShape& run);

}  // namespace choir::cli

#endif  // CHOIR_TOOLS_CHOIR_PERF_BASELINE_H_
