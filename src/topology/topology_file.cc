// Topology files (docs/topology.md): reading with validation that names the
// file, line and field of every mistake, and writing.
//
// Reading happens in two steps: ParseJsonWithLines gives a tree that knows
// the line of every value, then TopologyFileReader checks it field by field
// and builds the Topology. The reader is strict on purpose: a rank table is
// written by hand and a typo that is silently ignored ("grups") produces a
// topology-blind job, the failure this file exists to prevent.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "base/fd.h"
#include "base/json_text.h"
#include "base/strings.h"
#include "choir/topology.h"
#include "topology/build.h"
#include "topology/json_lines.h"
#include "topology/topology_file.h"

namespace choir {
namespace {

using topology::FormatRankList;
using topology::JsonMember;
using topology::JsonValue;

constexpr Code kBadFile = Code::kBadTopologyFile;
constexpr size_t kMaxFileBytes = 16u << 20;   // rank tables are kilobytes
constexpr int64_t kMaxPlaceNumber = 1 << 20;  // package, NUMA and CPU numbers
constexpr size_t kMaxInterfaceLength = 15;    // Linux IFNAMSIZ - 1
constexpr double kMinBandwidthGbps = 0.001;    // link classes: 1 MB/s ...
constexpr double kMaxBandwidthGbps = 100000;   // ... to 100 TB/s
constexpr double kMaxLatencyUs = 10000000;     // 10 s

const char* const kLinkNames[] = {"intra_group", "intra_host", "inter_host"};

// One rank number as written in the file, with where it was written.
struct RankRef {
  int64_t rank = 0;
  int line = 0;
  std::string field;
};

struct FileHost {
  std::string name;
  int line = 0;
  std::string field;  // "hosts[1]"
  std::vector<RankRef> ranks;
  std::vector<std::vector<RankRef>> groups;
  std::string interface;
  std::string ip;
};

struct FileRankEntry {
  RankRef rank;
  std::string interface;
  std::string ip;
  int package = -1;
  int numa = -1;
  std::vector<int> cores;
};

class TopologyFileReader {
 public:
  TopologyFileReader(std::string origin, int world_size)
      : origin_(std::move(origin)), job_world_(world_size) {}

  Result<Topology> Read(const JsonValue& root) {
    if (root.kind != JsonValue::Kind::kObject) {
      return Error(root.line, "(top level)",
                   "a topology file is a JSON object ({\"version\": 1, \"hosts\": [...]}), not " +
                       root.Describe());
    }
    // The version comes first: a newer file's fields are not typos.
    CHOIR_RETURN_IF_ERROR(ReadVersion(root));
    CHOIR_RETURN_IF_ERROR(
        CheckMembers(root, "", "the top level",
                     {"version", "world_size", "comment", "hosts", "links", "ranks"}));
    if (const JsonValue* comment = Get(root, "comment")) {
      CHOIR_RETURN_IF_ERROR(ReadString(*comment, "comment", /*allow_empty=*/true).status());
    }
    CHOIR_RETURN_IF_ERROR(ReadWorldSize(root));
    const JsonValue* hosts = Get(root, "hosts");
    if (hosts == nullptr) {
      return Error(root.line, "hosts", "missing: the file must list the hosts and their ranks");
    }
    CHOIR_RETURN_IF_ERROR(ReadHosts(*hosts));
    CHOIR_RETURN_IF_ERROR(CheckRankCoverage(*hosts));
    if (const JsonValue* links = Get(root, "links")) CHOIR_RETURN_IF_ERROR(ReadLinks(*links));
    if (const JsonValue* ranks = Get(root, "ranks")) CHOIR_RETURN_IF_ERROR(ReadRankEntries(*ranks));
    return Build();
  }

 private:
  Status Error(int line, const std::string& field, const std::string& what) const {
    return Status(kBadFile, fmt::format("{}:{}: {}: {}", origin_, line, field, what));
  }

  static std::string Join(const std::string& parent, std::string_view key) {
    return parent.empty() ? std::string(key) : parent + "." + std::string(key);
  }

  static const JsonValue* Get(const JsonValue& object, std::string_view key) {
    for (const JsonMember& m : object.members) {
      if (m.key == key) return &m.value;
    }
    return nullptr;
  }

  // Rejects keys that appear twice or that the schema does not know.
  Status CheckMembers(const JsonValue& object, const std::string& field, const char* what,
                      std::initializer_list<std::string_view> known) const {
    std::map<std::string, int> seen;
    for (const JsonMember& m : object.members) {
      const std::string path = Join(field, m.key);
      if (std::find(known.begin(), known.end(), m.key) == known.end()) {
        std::string message = fmt::format("unknown field \"{}\" in {}", m.key, what);
        std::string_view best;
        size_t best_distance = 3;  // more edits than this is not a typo
        for (std::string_view k : known) {
          // "latency" for "latency_us" is a typo too, though three edits away.
          const bool prefix =
              m.key.size() >= 3 && (k.starts_with(m.key) || std::string_view(m.key).starts_with(k));
          const size_t d = prefix ? 1 : strings::EditDistance(m.key, k);
          if (d < best_distance) {
            best_distance = d;
            best = k;
          }
        }
        if (!best.empty()) message += fmt::format(" (did you mean \"{}\"?)", best);
        message += fmt::format("; known fields: {}", fmt::join(known, ", "));
        return Error(m.key_line, path, message);
      }
      auto [it, added] = seen.emplace(m.key, m.key_line);
      if (!added) {
        return Error(
            m.key_line, path,
            fmt::format("field \"{}\" appears twice (first at line {})", m.key, it->second));
      }
    }
    return Status::Ok();
  }

  Status ExpectKind(const JsonValue& v, JsonValue::Kind kind, const std::string& field,
                    const char* expected) const {
    if (v.kind == kind) return Status::Ok();
    return Error(v.line, field, fmt::format("must be {}, not {}", expected, v.Describe()));
  }

  Result<int64_t> ReadInt(const JsonValue& v, const std::string& field, int64_t min,
                          int64_t max) const {
    bool in_range = false;
    if (v.kind == JsonValue::Kind::kInteger) {
      in_range = v.integer >= min && v.integer <= max;
    } else if (v.kind == JsonValue::Kind::kUnsigned) {
      in_range = v.non_negative <= static_cast<uint64_t>(max) &&
                 static_cast<int64_t>(v.non_negative) >= min;
    }
    if (!in_range) {
      return Error(v.line, field,
                   fmt::format("must be an integer from {} to {}, not {}", min, max, v.Describe()));
    }
    return v.kind == JsonValue::Kind::kInteger ? v.integer : static_cast<int64_t>(v.non_negative);
  }

  // Any integer (range checks come later, when the world is known).
  Result<int64_t> ReadRank(const JsonValue& v, const std::string& field) const {
    if (v.kind == JsonValue::Kind::kInteger) return v.integer;
    if (v.kind == JsonValue::Kind::kUnsigned) {
      return static_cast<int64_t>(std::min<uint64_t>(v.non_negative, INT64_MAX));
    }
    return Error(v.line, field, "a rank must be an integer, not " + v.Describe());
  }

  Result<std::string> ReadString(const JsonValue& v, const std::string& field,
                                 bool allow_empty) const {
    CHOIR_RETURN_IF_ERROR(ExpectKind(v, JsonValue::Kind::kString, field, "a string"));
    if (!allow_empty && v.text.empty()) return Error(v.line, field, "must not be empty");
    return v.text;
  }

  Result<std::string> ReadInterface(const JsonValue& v, const std::string& field) const {
    CHOIR_ASSIGN_OR_RETURN(std::string name, ReadString(v, field, false));
    const bool bad_char = std::any_of(name.begin(), name.end(), [](unsigned char c) {
      return c <= ' ' || c == '/' || c >= 0x7f;
    });
    if (name.size() > kMaxInterfaceLength || bad_char) {
      return Error(v.line, field,
                   fmt::format("\"{}\" is not a network interface name (at most {} characters, "
                               "no spaces or '/'; `ip -br link` lists them)",
                               name, kMaxInterfaceLength));
    }
    return name;
  }

  Result<std::string> ReadIp(const JsonValue& v, const std::string& field) const {
    CHOIR_ASSIGN_OR_RETURN(std::string ip, ReadString(v, field, false));
    unsigned char buffer[16];
    if (inet_pton(AF_INET, ip.c_str(), buffer) != 1 &&
        inet_pton(AF_INET6, ip.c_str(), buffer) != 1) {
      return Error(v.line, field, fmt::format("\"{}\" is not an IPv4 or IPv6 address", ip));
    }
    return ip;
  }

  Status ReadVersion(const JsonValue& root) {
    const JsonValue* version = Get(root, "version");
    if (version == nullptr) {
      return Error(root.line, "version",
                   fmt::format("missing: a topology file must say which format it uses "
                               "(\"version\": {})",
                               kTopologyFileVersion));
    }
    if (!version->IsInteger()) {
      return Error(
          version->line, "version",
          fmt::format("must be the integer {}, not {}", kTopologyFileVersion, version->Describe()));
    }
    const bool newer = version->kind == JsonValue::Kind::kUnsigned &&
                       version->non_negative > static_cast<uint64_t>(kTopologyFileVersion);
    if (newer) {
      return Error(version->line, "version",
                   fmt::format("version {} is newer than this choir reads (version {}); use the "
                               "choir that wrote the file, or rewrite it in version {}",
                               version->non_negative, kTopologyFileVersion, kTopologyFileVersion));
    }
    if (version->kind != JsonValue::Kind::kUnsigned ||
        version->non_negative != static_cast<uint64_t>(kTopologyFileVersion)) {
      return Error(version->line, "version",
                   fmt::format("{} is not a topology file version; the current version is {}",
                               version->Describe(), kTopologyFileVersion));
    }
    return Status::Ok();
  }

  Status ReadWorldSize(const JsonValue& root) {
    const JsonValue* world = Get(root, "world_size");
    if (world == nullptr) return Status::Ok();
    CHOIR_ASSIGN_OR_RETURN(const int64_t n,
                           ReadInt(*world, "world_size", 1, topology::kMaxWorldSize));
    if (job_world_ > 0 && n != job_world_) {
      return Error(
          world->line, "world_size",
          fmt::format("the file describes a world of {} ranks, but the job has {}", n, job_world_));
    }
    file_world_ = static_cast<int>(n);
    return Status::Ok();
  }

  Status ReadHosts(const JsonValue& hosts) {
    CHOIR_RETURN_IF_ERROR(ExpectKind(hosts, JsonValue::Kind::kArray, "hosts", "an array of hosts"));
    if (hosts.items.empty()) return Error(hosts.line, "hosts", "must list at least one host");
    for (size_t h = 0; h < hosts.items.size(); ++h) {
      CHOIR_RETURN_IF_ERROR(ReadHost(hosts.items[h], fmt::format("hosts[{}]", h)));
    }
    return Status::Ok();
  }

  Status ReadHost(const JsonValue& v, const std::string& field) {
    CHOIR_RETURN_IF_ERROR(ExpectKind(v, JsonValue::Kind::kObject, field, "an object"));
    CHOIR_RETURN_IF_ERROR(
        CheckMembers(v, field, "a host", {"name", "ranks", "groups", "interface", "ip"}));
    FileHost host;
    host.line = v.line;
    host.field = field;
    const JsonValue* name = Get(v, "name");
    if (name == nullptr) return Error(v.line, field + ".name", "missing: every host needs a name");
    CHOIR_ASSIGN_OR_RETURN(host.name, ReadString(*name, field + ".name", false));
    // By name, not by a scan of the hosts so far: with the scan, checking a
    // file of 50000 hosts took 8.9 s and one of 100000 did not end in 30 s.
    if (const auto seen = host_index_.find(host.name); seen != host_index_.end()) {
      const FileHost& other = hosts_[seen->second];
      return Error(name->line, field + ".name",
                   fmt::format("host name \"{}\" is already used by {} (line {})", host.name, other.field,
                               other.line));
    }
    host_index_.emplace(host.name, hosts_.size());
    const JsonValue* ranks = Get(v, "ranks");
    if (ranks == nullptr)
      return Error(v.line, field + ".ranks", "missing: every host lists its ranks");
    CHOIR_ASSIGN_OR_RETURN(host.ranks, ReadRankList(*ranks, field + ".ranks", "host"));
    if (const JsonValue* groups = Get(v, "groups")) {
      CHOIR_RETURN_IF_ERROR(ReadGroups(*groups, field + ".groups", host));
    }
    if (const JsonValue* iface = Get(v, "interface")) {
      CHOIR_ASSIGN_OR_RETURN(host.interface, ReadInterface(*iface, field + ".interface"));
    }
    if (const JsonValue* ip = Get(v, "ip")) {
      CHOIR_ASSIGN_OR_RETURN(host.ip, ReadIp(*ip, field + ".ip"));
    }
    hosts_.push_back(std::move(host));
    return Status::Ok();
  }

  Result<std::vector<RankRef>> ReadRankList(const JsonValue& v, const std::string& field,
                                            const char* holder) const {
    CHOIR_RETURN_IF_ERROR(ExpectKind(v, JsonValue::Kind::kArray, field, "an array of ranks"));
    if (v.items.empty()) {
      return Error(v.line, field, fmt::format("a {} must hold at least one rank", holder));
    }
    std::vector<RankRef> refs;
    for (size_t i = 0; i < v.items.size(); ++i) {
      const std::string item_field = fmt::format("{}[{}]", field, i);
      CHOIR_ASSIGN_OR_RETURN(const int64_t rank, ReadRank(v.items[i], item_field));
      refs.push_back(RankRef{rank, v.items[i].line, item_field});
    }
    return refs;
  }

  Status ReadGroups(const JsonValue& v, const std::string& field, FileHost& host) const {
    CHOIR_RETURN_IF_ERROR(
        ExpectKind(v, JsonValue::Kind::kArray, field, "an array of groups (arrays of ranks)"));
    std::map<int64_t, const RankRef*> in_host;
    for (const RankRef& r : host.ranks) in_host.emplace(r.rank, &r);
    std::map<int64_t, RankRef> grouped;  // rank -> where it was first grouped
    for (size_t g = 0; g < v.items.size(); ++g) {
      const std::string group_field = fmt::format("{}[{}]", field, g);
      CHOIR_ASSIGN_OR_RETURN(std::vector<RankRef> group,
                             ReadRankList(v.items[g], group_field, "group"));
      for (const RankRef& r : group) {
        if (in_host.count(r.rank) == 0) {
          return Error(r.line, r.field,
                       fmt::format("rank {} is not a rank of host \"{}\" (its ranks: {}); a group "
                                   "holds ranks of its own host only",
                                   r.rank, host.name, RefList(host.ranks)));
        }
        auto [it, added] = grouped.emplace(r.rank, r);
        if (!added) {
          return Error(r.line, r.field,
                       fmt::format("rank {} is already in {} (line {}); groups must not overlap",
                                   r.rank, GroupOf(it->second.field), it->second.line));
        }
      }
      host.groups.push_back(std::move(group));
    }
    if (!v.items.empty()) {
      std::vector<int> ungrouped;
      for (const RankRef& r : host.ranks) {
        if (grouped.count(r.rank) == 0 && r.rank >= 0 && r.rank <= INT32_MAX) {
          ungrouped.push_back(static_cast<int>(r.rank));
        }
      }
      if (!ungrouped.empty()) {
        std::sort(ungrouped.begin(), ungrouped.end());
        return Error(v.line, field,
                     fmt::format("rank{} {} of host \"{}\" {} in no group; groups must cover every "
                                 "rank of their host (or be left out)",
                                 ungrouped.size() == 1 ? "" : "s", FormatRankList(ungrouped),
                                 host.name, ungrouped.size() == 1 ? "is" : "are"));
      }
    }
    return Status::Ok();
  }

  // "hosts[0].groups[1]" for "hosts[0].groups[1][2]".
  static std::string GroupOf(const std::string& item_field) {
    return item_field.substr(0, item_field.rfind('['));
  }

  static std::string RefList(const std::vector<RankRef>& refs) {
    std::vector<int> ranks;
    for (const RankRef& r : refs) {
      if (r.rank >= 0 && r.rank <= INT32_MAX) ranks.push_back(static_cast<int>(r.rank));
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    return FormatRankList(ranks);
  }

  // Every rank of the world on exactly one host.
  Status CheckRankCoverage(const JsonValue& hosts_value) {
    if (job_world_ > 0) {
      world_ = job_world_;
    } else if (file_world_ > 0) {
      world_ = file_world_;
    } else {
      int64_t highest = -1;
      for (const FileHost& host : hosts_) {
        for (const RankRef& r : host.ranks) {
          if (r.rank >= topology::kMaxWorldSize) {
            return Error(
                r.line, r.field,
                fmt::format("rank {} is beyond the largest world choir supports ({} ranks)", r.rank,
                            topology::kMaxWorldSize));
          }
          highest = std::max(highest, r.rank);
        }
      }
      world_ = static_cast<int>(highest + 1);
    }
    for (const FileHost& host : hosts_) {
      for (const RankRef& r : host.ranks) {
        if (r.rank < 0 || r.rank >= world_) {
          return Error(r.line, r.field,
                       fmt::format("rank {} is outside the world of {} ranks (0-{})", r.rank,
                                   world_, world_ - 1));
        }
      }
    }
    std::vector<std::pair<const FileHost*, const RankRef*>> owner(static_cast<size_t>(world_));
    for (const FileHost& host : hosts_) {
      for (const RankRef& r : host.ranks) {
        auto& slot = owner[static_cast<size_t>(r.rank)];
        if (slot.first != nullptr) {
          const std::string where =
              slot.first == &host
                  ? fmt::format("twice in host \"{}\"", host.name)
                  : fmt::format("on two hosts, \"{}\" and \"{}\"", slot.first->name, host.name);
          return Error(r.line, r.field,
                       fmt::format("rank {} is listed {} (first at line {}, {}); a rank runs on "
                                   "one host",
                                   r.rank, where, slot.second->line, slot.second->field));
        }
        slot = {&host, &r};
      }
    }
    std::vector<int> missing;
    for (int r = 0; r < world_; ++r) {
      if (owner[static_cast<size_t>(r)].first == nullptr) missing.push_back(r);
    }
    if (!missing.empty()) {
      return Error(hosts_value.line, "hosts",
                   fmt::format("rank{} {} of the world of {} {} on no host; every rank 0-{} must "
                               "be listed by exactly one host",
                               missing.size() == 1 ? "" : "s", FormatRankList(missing), world_,
                               missing.size() == 1 ? "is" : "are", world_ - 1));
    }
    return Status::Ok();
  }

  Status ReadLinks(const JsonValue& v) {
    CHOIR_RETURN_IF_ERROR(ExpectKind(v, JsonValue::Kind::kObject, "links", "an object"));
    CHOIR_RETURN_IF_ERROR(CheckMembers(v, "links", "links (the link classes)",
                                       {kLinkNames[0], kLinkNames[1], kLinkNames[2]}));
    links_ = DefaultLinks();
    for (const JsonMember& m : v.members) {
      const std::string field = "links." + m.key;
      CHOIR_RETURN_IF_ERROR(ExpectKind(m.value, JsonValue::Kind::kObject, field, "an object"));
      CHOIR_RETURN_IF_ERROR(
          CheckMembers(m.value, field, "a link class", {"bandwidth_gbps", "latency_us"}));
      LinkClass* link = nullptr;
      for (LinkClass& l : links_) {
        if (l.name == m.key) link = &l;
      }
      if (const JsonValue* bw = Get(m.value, "bandwidth_gbps")) {
        const std::string bw_field = field + ".bandwidth_gbps";
        CHOIR_ASSIGN_OR_RETURN(link->bandwidth_gbps, ReadNumber(*bw, bw_field));
        // From a slow WAN link to far beyond any memory bus: outside it the
        // cost model's times turn into 0 or inf.
        if (!(link->bandwidth_gbps >= kMinBandwidthGbps && link->bandwidth_gbps <= kMaxBandwidthGbps)) {
          return Error(bw->line, bw_field,
                       fmt::format("bandwidth must be {} to {} GB/s, not {}", kMinBandwidthGbps,
                                   kMaxBandwidthGbps, link->bandwidth_gbps));
        }
      }
      if (const JsonValue* lat = Get(m.value, "latency_us")) {
        const std::string lat_field = field + ".latency_us";
        CHOIR_ASSIGN_OR_RETURN(link->latency_us, ReadNumber(*lat, lat_field));
        if (!(link->latency_us >= 0 && link->latency_us <= kMaxLatencyUs)) {
          return Error(lat->line, lat_field,
                       fmt::format("latency must be 0 to {} us, not {}", kMaxLatencyUs,
                                   link->latency_us));
        }
      }
    }
    return Status::Ok();
  }

  Result<double> ReadNumber(const JsonValue& v, const std::string& field) const {
    if (!v.IsNumber() || !std::isfinite(v.AsDouble())) {
      return Error(v.line, field, "must be a finite number, not " + v.Describe());
    }
    return v.AsDouble();
  }

  Status ReadRankEntries(const JsonValue& v) {
    CHOIR_RETURN_IF_ERROR(
        ExpectKind(v, JsonValue::Kind::kArray, "ranks", "an array of per-rank objects"));
    std::map<int64_t, const FileRankEntry*> seen;
    entries_.reserve(v.items.size());  // `seen` points into it
    for (size_t i = 0; i < v.items.size(); ++i) {
      const JsonValue& item = v.items[i];
      const std::string field = fmt::format("ranks[{}]", i);
      CHOIR_RETURN_IF_ERROR(ExpectKind(item, JsonValue::Kind::kObject, field, "an object"));
      CHOIR_RETURN_IF_ERROR(CheckMembers(item, field, "a rank entry",
                                         {"rank", "interface", "ip", "package", "numa", "cores"}));
      FileRankEntry entry;
      const JsonValue* rank = Get(item, "rank");
      if (rank == nullptr) {
        return Error(item.line, field + ".rank", "missing: each entry names the rank it describes");
      }
      CHOIR_ASSIGN_OR_RETURN(entry.rank.rank, ReadRank(*rank, field + ".rank"));
      entry.rank.line = rank->line;
      entry.rank.field = field + ".rank";
      if (entry.rank.rank < 0 || entry.rank.rank >= world_) {
        return Error(rank->line, entry.rank.field,
                     fmt::format("rank {} is outside the world of {} ranks (0-{})", entry.rank.rank,
                                 world_, world_ - 1));
      }
      if (auto it = seen.find(entry.rank.rank); it != seen.end()) {
        return Error(
            rank->line, entry.rank.field,
            fmt::format("rank {} already has an entry ({}, line {})", entry.rank.rank,
                        it->second->rank.field.substr(0, it->second->rank.field.rfind('.')),
                        it->second->rank.line));
      }
      if (const JsonValue* iface = Get(item, "interface")) {
        CHOIR_ASSIGN_OR_RETURN(entry.interface, ReadInterface(*iface, field + ".interface"));
      }
      if (const JsonValue* ip = Get(item, "ip")) {
        CHOIR_ASSIGN_OR_RETURN(entry.ip, ReadIp(*ip, field + ".ip"));
      }
      if (const JsonValue* package = Get(item, "package")) {
        CHOIR_ASSIGN_OR_RETURN(const int64_t p,
                               ReadInt(*package, field + ".package", 0, kMaxPlaceNumber));
        entry.package = static_cast<int>(p);
      }
      if (const JsonValue* numa = Get(item, "numa")) {
        CHOIR_ASSIGN_OR_RETURN(const int64_t n,
                               ReadInt(*numa, field + ".numa", 0, kMaxPlaceNumber));
        entry.numa = static_cast<int>(n);
      }
      if (const JsonValue* cores = Get(item, "cores")) {
        CHOIR_RETURN_IF_ERROR(ReadCores(*cores, field + ".cores", entry.cores));
      }
      entries_.push_back(std::move(entry));
      seen.emplace(entries_.back().rank.rank, &entries_.back());
    }
    return Status::Ok();
  }

  Status ReadCores(const JsonValue& v, const std::string& field, std::vector<int>& cores) const {
    CHOIR_RETURN_IF_ERROR(ExpectKind(v, JsonValue::Kind::kArray, field, "an array of CPU numbers"));
    std::map<int64_t, int> seen;
    for (size_t i = 0; i < v.items.size(); ++i) {
      const std::string item_field = fmt::format("{}[{}]", field, i);
      CHOIR_ASSIGN_OR_RETURN(const int64_t cpu,
                             ReadInt(v.items[i], item_field, 0, kMaxPlaceNumber));
      auto [it, added] = seen.emplace(cpu, v.items[i].line);
      if (!added) {
        return Error(v.items[i].line, item_field,
                     fmt::format("CPU {} is listed twice (first at line {})", cpu, it->second));
      }
      cores.push_back(static_cast<int>(cpu));
    }
    std::sort(cores.begin(), cores.end());
    return Status::Ok();
  }

  Topology Build() {
    Topology t;
    t.world_size = world_;
    t.source = "file " + origin_;
    t.links = links_.empty() ? DefaultLinks() : links_;
    t.ranks.resize(static_cast<size_t>(world_));
    for (int r = 0; r < world_; ++r) t.ranks[static_cast<size_t>(r)].rank = r;
    for (const FileHost& fh : hosts_) {
      HostInfo host;
      host.name = fh.name;
      for (const RankRef& r : fh.ranks) {
        RankPlace& place = t.ranks[static_cast<size_t>(r.rank)];
        place.host = fh.name;
        place.interface = fh.interface;
        place.ip = fh.ip;
        host.ranks.push_back(static_cast<int>(r.rank));
      }
      std::sort(host.ranks.begin(), host.ranks.end());
      for (const std::vector<RankRef>& fg : fh.groups) {
        std::vector<int> group;
        for (const RankRef& r : fg) group.push_back(static_cast<int>(r.rank));
        std::sort(group.begin(), group.end());
        host.groups.push_back(std::move(group));
      }
      std::sort(host.groups.begin(), host.groups.end());  // by lowest rank: groups are disjoint
      t.hosts.push_back(std::move(host));
    }
    std::sort(t.hosts.begin(), t.hosts.end(), [](const HostInfo& a, const HostInfo& b) {
      return a.ranks.front() < b.ranks.front();
    });
    for (const FileRankEntry& e : entries_) {
      RankPlace& place = t.ranks[static_cast<size_t>(e.rank.rank)];
      if (!e.interface.empty()) place.interface = e.interface;
      if (!e.ip.empty()) place.ip = e.ip;
      place.package = e.package;
      place.numa = e.numa;
      place.cores = e.cores;
    }
    return t;
  }

  std::string origin_;
  int job_world_ = 0;
  int file_world_ = 0;
  int world_ = 0;
  std::vector<FileHost> hosts_;
  std::unordered_map<std::string, size_t> host_index_;  // name -> index in hosts_
  std::vector<LinkClass> links_;
  std::vector<FileRankEntry> entries_;
};

// Invalid UTF-8 (a CHOIR_HOST_ID of raw bytes) is replaced, not thrown.
std::string JsonText(const std::string& s) {
  return JsonDump(nlohmann::json(s));
}
std::string JsonNumber(double d) { return JsonDump(nlohmann::json(d)); }

std::string IntList(const std::vector<int>& values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

// The interface (or ip) every rank of `host` shares, or "" when they differ.
std::string SharedBy(const Topology& t, const HostInfo& host, std::string RankPlace::*field) {
  std::string shared;
  for (size_t i = 0; i < host.ranks.size(); ++i) {
    const int r = host.ranks[i];
    if (r < 0 || r >= static_cast<int>(t.ranks.size())) return "";
    const std::string& value = t.ranks[static_cast<size_t>(r)].*field;
    if (i == 0) shared = value;
    if (value != shared) return "";
  }
  return shared;
}

}  // namespace

Result<Topology> ParseTopology(const std::string& text, const std::string& origin, int world_size) {
  if (world_size < 0 || world_size > topology::kMaxWorldSize) {
    return InvalidArgument(fmt::format("world size {} for topology file {} is outside 0-{}",
                                       world_size, origin, topology::kMaxWorldSize));
  }
  CHOIR_ASSIGN_OR_RETURN(JsonValue root, topology::ParseJsonWithLines(text, origin, kBadFile));
  return TopologyFileReader(origin, world_size).Read(root);
}

namespace topology {
Result<std::string> ReadTopologyText(const std::string& path) {
  // O_NONBLOCK: opening a FIFO by mistake must not wait for a writer.
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) {
    return Status(kBadFile,
                  fmt::format("cannot open topology file {}: {}", path, std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Status(kBadFile, fmt::format("topology file {} is not a regular file", path));
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    return Status(kBadFile, fmt::format("topology file {} is {} bytes; more than {} is not a "
                                        "topology file",
                                        path, st.st_size, kMaxFileBytes));
  }
  std::string text;
  char buffer[65536];
  while (text.size() <= kMaxFileBytes) {
    const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Status(kBadFile,
                    fmt::format("cannot read topology file {}: {}", path, std::strerror(errno)));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}
}  // namespace topology

Result<Topology> LoadTopologyFile(const std::string& path, int world_size) {
  CHOIR_ASSIGN_OR_RETURN(std::string text, topology::ReadTopologyText(path));
  return ParseTopology(text, path, world_size);
}

std::string TopologyToJson(const Topology& topology) {
  std::string out = "{\n";
  out += fmt::format("  \"version\": {},\n", kTopologyFileVersion);
  out += fmt::format("  \"world_size\": {},\n", topology.world_size);
  if (!topology.source.empty())
    out += fmt::format("  \"comment\": {},\n", JsonText(topology.source));

  out += "  \"hosts\": [\n";
  std::vector<std::string> host_iface(topology.hosts.size());
  std::vector<std::string> host_ip(topology.hosts.size());
  for (size_t h = 0; h < topology.hosts.size(); ++h) {
    const HostInfo& host = topology.hosts[h];
    host_iface[h] = SharedBy(topology, host, &RankPlace::interface);
    host_ip[h] = SharedBy(topology, host, &RankPlace::ip);
    std::string line =
        fmt::format("    {{\"name\": {}, \"ranks\": {}", JsonText(host.name), IntList(host.ranks));
    if (!host.groups.empty()) {
      std::vector<std::string> groups;
      for (const std::vector<int>& g : host.groups) groups.push_back(IntList(g));
      line += fmt::format(", \"groups\": [{}]", fmt::join(groups, ", "));
    }
    if (!host_iface[h].empty()) line += ", \"interface\": " + JsonText(host_iface[h]);
    if (!host_ip[h].empty()) line += ", \"ip\": " + JsonText(host_ip[h]);
    out += line + (h + 1 < topology.hosts.size() ? "},\n" : "}\n");
  }
  out += "  ],\n";

  out += "  \"links\": {\n";
  for (size_t i = 0; i < topology.links.size(); ++i) {
    const LinkClass& link = topology.links[i];
    out += fmt::format("    {}: {{\"bandwidth_gbps\": {}, \"latency_us\": {}}}{}\n",
                       JsonText(link.name), JsonNumber(link.bandwidth_gbps),
                       JsonNumber(link.latency_us), i + 1 < topology.links.size() ? "," : "");
  }
  out += "  }";

  std::vector<std::string> entries;
  for (const RankPlace& place : topology.ranks) {
    const int h = topology.HostOf(place.rank);
    const std::string shared_iface = h < 0 ? "" : host_iface[static_cast<size_t>(h)];
    const std::string shared_ip = h < 0 ? "" : host_ip[static_cast<size_t>(h)];
    std::string entry;
    if (!place.interface.empty() && place.interface != shared_iface) {
      entry += ", \"interface\": " + JsonText(place.interface);
    }
    if (!place.ip.empty() && place.ip != shared_ip) entry += ", \"ip\": " + JsonText(place.ip);
    if (place.package >= 0) entry += fmt::format(", \"package\": {}", place.package);
    if (place.numa >= 0) entry += fmt::format(", \"numa\": {}", place.numa);
    if (!place.cores.empty()) entry += ", \"cores\": " + IntList(place.cores);
    if (!entry.empty()) entries.push_back(fmt::format("    {{\"rank\": {}{}}}", place.rank, entry));
  }
  if (!entries.empty()) {
    out += fmt::format(",\n  \"ranks\": [\n{}\n  ]", fmt::join(entries, ",\n"));
  }
  out += "\n}\n";
  return out;
}

}  // namespace choir
