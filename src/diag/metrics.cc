#include "diag/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "algorithms/algorithms.h"
#include "choir/status.h"

namespace choir::diag {
namespace {

struct Family {
  const char* name;
  const char* type;
  const char* help;
};
// Order matters: AppendFamily switches on the index.
constexpr Family kFamilies[] = {
    {"choir_communicator_info", "gauge", "Communicators in this process (value 1), with job, communicator, rank and world size."},
    {"choir_collectives_total", "counter", "Operations finished, by collective and outcome."},
    {"choir_collective_bytes_total", "counter", "Bytes moved by finished operations (nccl-tests convention: the largest buffer)."},
    {"choir_collective_duration_seconds", "histogram", "Duration of operations, by collective and message size class."},
    {"choir_algorithm_selections_total", "counter", "Algorithm chosen, by collective."},
    {"choir_errors_total", "counter", "Failed operations, by choir error code."},
    {"choir_late_arrival_seconds_total", "counter", "Time this rank waited in collectives before the first data from a peer arrived (the straggler signal)."},
    {"choir_peer_bytes_sent_total", "counter", "Bytes sent to each peer rank."},
    {"choir_peer_bytes_received_total", "counter", "Bytes received from each peer rank."},
    {"choir_transport_bytes_sent_total", "counter", "Bytes sent, by transport."},
    {"choir_transport_bytes_received_total", "counter", "Bytes received, by transport."},
    {"choir_communicator_size", "gauge", "Ranks in the communicator (for busbw factors and missing-rank alerts)."},
};
constexpr int kNumFamilies = sizeof(kFamilies) / sizeof(kFamilies[0]);

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string FormatSeconds(double s) { return fmt::format("{:.9g}", s); }

std::mutex g_mu;
std::vector<std::weak_ptr<CommMetrics>>& Comms() {
  static auto* comms = new std::vector<std::weak_ptr<CommMetrics>>();
  return *comms;
}

const char* const kTransportNames[2] = {"shm", "tcp"};

}  // namespace

const char* SizeClassName(int size_class) {
  static const char* kNames[kSizeClasses] = {"le4KiB", "le256KiB", "le16MiB", "gt16MiB"};
  return kNames[size_class];
}

CommMetrics::CommMetrics(std::string job, std::string comm, int rank, int size, uint32_t time_one_in)
    : job_(std::move(job)),
      comm_(std::move(comm)),
      rank_(rank),
      size_(size),
      time_one_in_(std::max<uint32_t>(time_one_in, 1)),
      peer_sent_(static_cast<size_t>(size)),
      peer_received_(static_cast<size_t>(size)) {}

namespace {
// Each communicator runs one operation at a time (comm/engine.h), so every
// counter of it has a single writer: a plain relaxed add, without the locked
// read-modify-write a concurrent writer would need. Readers still see each
// value whole.
void Add(std::atomic<uint64_t>& counter, uint64_t value) {
  counter.store(counter.load(std::memory_order_relaxed) + value, std::memory_order_relaxed);
}
}  // namespace

void CommMetrics::RecordOp(algorithms::CollKind kind, uint64_t bytes, double seconds, bool ok, int algorithm,
                           double late_arrival_seconds) {
  OpCounters& c = ops_[static_cast<size_t>(kind)];
  Add(ok ? c.completed : c.failed, 1);
  if (!ok) return;
  Add(c.bytes, bytes);
  const auto sc = static_cast<size_t>(SizeClassOf(bytes));
  size_t bucket = 0;
  while (bucket < kDurationBuckets.size() && seconds > kDurationBuckets[bucket]) ++bucket;
  const TimedSample sample{true, static_cast<uint8_t>(bucket), static_cast<uint64_t>(seconds * 1e9),
                           late_arrival_seconds > 0 ? static_cast<uint64_t>(late_arrival_seconds * 1e9) : 0};
  c.last[sc] = sample;
  AddSample(c, sc, sample, algorithm);
}

void CommMetrics::RecordUntimedOp(algorithms::CollKind kind, uint64_t bytes, bool ok, int algorithm) {
  OpCounters& c = ops_[static_cast<size_t>(kind)];
  Add(ok ? c.completed : c.failed, 1);
  if (!ok) return;
  Add(c.bytes, bytes);
  const auto sc = static_cast<size_t>(SizeClassOf(bytes));
  AddSample(c, sc, c.last[sc], algorithm);
}

void CommMetrics::AddSample(OpCounters& c, size_t sc, const TimedSample& sample, int algorithm) {
  Add(c.buckets[sc][sample.bucket], 1);
  Add(c.duration_ns[sc], sample.ns);
  Add(c.count[sc], 1);
  if (sample.late_ns > 0) Add(late_arrival_ns_, sample.late_ns);
  if (algorithm >= 0 && algorithm < kMaxAlgorithms) Add(algorithm_counts_[static_cast<size_t>(algorithm)], 1);
}

void CommMetrics::RecordError(int code) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(errors_.begin(), errors_.end(), [&](const auto& p) { return p.first == code; });
  if (it == errors_.end()) {
    errors_.emplace_back(code, 1);
  } else {
    ++it->second;
  }
}

void CommMetrics::AddPeerBytes(int peer, int transport, uint64_t sent, uint64_t received) {
  if (peer < 0 || peer >= size_ || transport < 0 || transport > 1) return;
  Add(peer_sent_[static_cast<size_t>(peer)], sent);
  Add(peer_received_[static_cast<size_t>(peer)], received);
  Add(transport_sent_[static_cast<size_t>(transport)], sent);
  Add(transport_received_[static_cast<size_t>(transport)], received);
}

std::string CommMetrics::Labels() const {
  return fmt::format("job=\"{}\",comm=\"{}\",rank=\"{}\",size=\"{}\"", Escape(job_), Escape(comm_), rank_, size_);
}

void CommMetrics::AppendFamily(int family, std::string* out) const {
  const std::string base = Labels();
  const char* name = kFamilies[family].name;
  auto line = [&](const std::string& extra, const std::string& value, const char* suffix = "") {
    *out += fmt::format("{}{}{{{}{}}} {}\n", name, suffix, base, extra, value);
  };
  switch (family) {
    case 0:
      line("", "1");
      break;
    case 1:
    case 2:
    case 3:
      for (int k = 1; k < algorithms::kNumCollKinds; ++k) {
        const OpCounters& c = ops_[static_cast<size_t>(k)];
        const std::string op = fmt::format(",op=\"{}\"", algorithms::CollKindName(static_cast<algorithms::CollKind>(k)));
        const uint64_t done = c.completed.load(std::memory_order_relaxed);
        const uint64_t failed = c.failed.load(std::memory_order_relaxed);
        if (done == 0 && failed == 0) continue;
        if (family == 1) {
          line(op + ",status=\"ok\"", std::to_string(done));
          line(op + ",status=\"error\"", std::to_string(failed));
        } else if (family == 2) {
          line(op, std::to_string(c.bytes.load(std::memory_order_relaxed)));
        } else {
          for (int sc = 0; sc < kSizeClasses; ++sc) {
            const uint64_t count = c.count[static_cast<size_t>(sc)].load(std::memory_order_relaxed);
            if (count == 0) continue;
            const std::string labels = op + fmt::format(",size_class=\"{}\"", SizeClassName(sc));
            uint64_t cumulative = 0;
            for (size_t b = 0; b <= kDurationBuckets.size(); ++b) {
              cumulative += c.buckets[static_cast<size_t>(sc)][b].load(std::memory_order_relaxed);
              const std::string le = b < kDurationBuckets.size() ? FormatSeconds(kDurationBuckets[b]) : "+Inf";
              line(labels + ",le=\"" + le + "\"", std::to_string(cumulative), "_bucket");
            }
            line(labels, FormatSeconds(static_cast<double>(c.duration_ns[static_cast<size_t>(sc)].load()) * 1e-9), "_sum");
            line(labels, std::to_string(count), "_count");
          }
        }
      }
      break;
    case 4: {
      const auto& all = algorithms::AllAlgorithms();
      for (size_t i = 0; i < all.size() && i < static_cast<size_t>(kMaxAlgorithms); ++i) {
        const uint64_t n = algorithm_counts_[i].load(std::memory_order_relaxed);
        if (n == 0) continue;
        line(fmt::format(",op=\"{}\",algorithm=\"{}\"", algorithms::CollKindName(all[i].kind), all[i].name),
             std::to_string(n));
      }
      break;
    }
    case 5: {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [code, n] : errors_) {
        const ErrorInfo* info = FindErrorInfo(code);
        line(fmt::format(",code=\"E{}\",name=\"{}\"", code, info ? info->name : "Unknown"), std::to_string(n));
      }
      break;
    }
    case 6:
      line("", FormatSeconds(static_cast<double>(late_arrival_ns_.load(std::memory_order_relaxed)) * 1e-9));
      break;
    case 7:
    case 8:
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        const auto& v = family == 7 ? peer_sent_ : peer_received_;
        line(fmt::format(",peer=\"{}\"", p), std::to_string(v[static_cast<size_t>(p)].load(std::memory_order_relaxed)));
      }
      break;
    case 9:
    case 10:
      for (int t = 0; t < 2; ++t) {
        const auto& v = family == 9 ? transport_sent_ : transport_received_;
        line(fmt::format(",transport=\"{}\"", kTransportNames[t]), std::to_string(v[static_cast<size_t>(t)].load(std::memory_order_relaxed)));
      }
      break;
    case 11:
      line("", std::to_string(size_));
      break;
    default:
      break;
  }
}

std::shared_ptr<CommMetrics> RegisterComm(std::string job, std::string comm, int rank, int size,
                                          uint32_t time_one_in) {
  auto m = std::make_shared<CommMetrics>(std::move(job), std::move(comm), rank, size, time_one_in);
  std::lock_guard<std::mutex> lock(g_mu);
  auto& comms = Comms();
  comms.erase(std::remove_if(comms.begin(), comms.end(), [](const auto& w) { return w.expired(); }), comms.end());
  comms.push_back(m);
  return m;
}

std::string RenderPrometheus() {
  std::vector<std::shared_ptr<CommMetrics>> live;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (const auto& w : Comms()) {
      if (auto m = w.lock()) live.push_back(std::move(m));
    }
  }
  std::string out;
  for (int f = 0; f < kNumFamilies; ++f) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", kFamilies[f].name, kFamilies[f].help,
                       kFamilies[f].name, kFamilies[f].type);
    for (const auto& m : live) m->AppendFamily(f, &out);
  }
  return out;
}

}  // namespace choir::diag

namespace choir {
std::string RenderMetrics() { return diag::RenderPrometheus(); }
}  // namespace choir
