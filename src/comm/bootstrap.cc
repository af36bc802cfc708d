// Creating a communicator: settings, this rank's place (topology file,
// inherited from the parent, or detected), rendezvous through the store
// (every rank publishes who and where it is), identity checks, and links to
// every peer.
#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <optional>
#include <span>
#include <nlohmann/json.hpp>

#include "algorithms/switch_points.h"
#include "base/json_text.h"
#include "base/logging.h"
#include "base/socket.h"
#include "base/strings.h"
#include "choir/settings.h"
#include "choir/version.h"
#include "comm/comm_impl.h"
#include "comm/join_reports.h"
#include "comm/join_sizes.h"
#include "diag/metrics_endpoint.h"
#include "kernels/reduce.h"
#include "params/params.h"
#include "topology/build.h"
#include "topology/machine.h"
#include "topology/topology_file.h"
#include "transport/tcp/interfaces.h"

namespace choir::comm {
namespace {

using json = nlohmann::json;

// A communicator's name prefixes every store key it uses (and its splits').
constexpr size_t kMaxCommNameBytes = 1024;

// This kernel's boot id (changes at every boot; equal for all its processes).
std::string BootId() {
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  return boot;
}

std::string HostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::string DetectHostId() { return HostName() + "/" + BootId().substr(0, 8); }

// Identifies this kernel and network namespace: ranks that share both can
// reach each other's loopback addresses.
std::string NetworkNamespace() {
  const std::string boot = BootId();
  char link[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/net", link, sizeof(link) - 1);
  return boot + "/" + (n > 0 ? std::string(link, static_cast<size_t>(n)) : std::string("?"));
}

void WarnUnknownSettingsOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& name : UnknownSettingsInEnvironment()) {
      CHOIR_LOG(Warn, PARAMS, "{} is not a choir setting (typo?); `choir doctor params` lists them", name);
    }
  });
}

Result<CommConfig> ResolveConfig(const CommOptions& options) {
  CHOIR_RETURN_IF_ERROR(params::CheckAll());
  CommConfig c;
  c.name = options.name.empty() ? "world" : options.name;
  // The name prefixes every store key of the communicator (and of its splits).
  if (c.name.size() > kMaxCommNameBytes) {
    return InvalidArgument(fmt::format("communicator name '{}...' is {} bytes (a split's name is its parent's "
                                       "plus /splitN/colorC); give names of at most {}",
                                       c.name.substr(0, 40), c.name.size(), kMaxCommNameBytes));
  }
  c.job_id = options.job_id.empty() ? params::GetString(params::Id::kJobId) : options.job_id;
  c.host_id = options.host_id.empty() ? params::GetString(params::Id::kHostId) : options.host_id;
  if (c.host_id.empty()) c.host_id = DetectHostId();
  c.timeout_seconds = options.timeout.count() > 0 ? static_cast<double>(options.timeout.count()) / 1000
                                                  : params::GetSeconds(params::Id::kTimeout);
  const std::string transport =
      options.transport.empty() ? params::GetString(params::Id::kTransport) : options.transport;
  if (transport == "auto") {
    c.transport = transport::TransportChoice::kAuto;
  } else if (transport == "tcp") {
    c.transport = transport::TransportChoice::kTcp;
  } else if (transport == "shm") {
    c.transport = transport::TransportChoice::kShm;
  } else {
    return InvalidArgument("transport '" + transport + "' is not one of auto, tcp, shm");
  }
  const std::string mismatch = params::GetString(params::Id::kMismatchCheck);
  c.mismatch = mismatch == "off" ? MismatchCheck::kOff
                                 : mismatch == "full" ? MismatchCheck::kFull : MismatchCheck::kHeaders;
  c.stall_seconds = params::GetSeconds(params::Id::kStallSeconds);
  c.async_bytes = params::GetBytes(params::Id::kAsyncBytes);
  c.time_one_in = static_cast<uint32_t>(params::GetInt(params::Id::kTimeOneIn));
  c.select.small_bytes = params::GetBytes(params::Id::kSmallBytes);
  c.select.adapt_walks = params::GetBool(params::Id::kShmAdapt);
  const std::string staging = params::GetString(params::Id::kShmStaging);
  using Staging = algorithms::SelectConfig::Staging;
  c.select.staging = staging == "plain" ? Staging::kPlain : staging == "streaming" ? Staging::kStreaming : Staging::kAuto;
  CHOIR_ASSIGN_OR_RETURN(c.select.rules,
                         algorithms::ParseAlgoRules(params::GetString(params::Id::kAlgo)));
  return c;
}

// This process's CPU place as hwloc sees it, detected once per process.
const RankPlace& DetectedPlace() {
  static const RankPlace place = [] {
    Result<RankPlace> p = DetectPlace();
    return p.ok() ? *p : RankPlace{};
  }();
  return place;
}

// Where this rank is and what its links cost, before the rendezvous.
struct PlaceChoice {
  RankPlace place;
  std::optional<Topology> file;  // the whole topology file, when one is used
  algorithms::LinkCost intra_host{1e-6, 10e9};
  algorithms::LinkCost inter_host{20e-6, 3e9};
  std::string source = "detected";
  std::string fingerprint;
};

Result<PlaceChoice> ChoosePlace(const CommOptions& options, const comm::InheritedPlace* inherited, int rank,
                                int size, CommConfig& config) {
  PlaceChoice c;
  if (inherited != nullptr) {
    c.place = inherited->place;
    c.intra_host = inherited->intra_host;
    c.inter_host = inherited->inter_host;
    c.source = inherited->source;
    c.fingerprint = inherited->fingerprint;
  } else if (const std::string path = params::GetString(params::Id::kTopoFile); !path.empty()) {
    // Read once: the fingerprint must be of the very bytes that were parsed.
    Result<std::string> text = topology::ReadTopologyText(path);
    Result<Topology> file = text.ok() ? ParseTopology(*text, path, size) : Result<Topology>(text.status());
    if (!file.ok()) return file.status().WithContext("CHOIR_TOPO_FILE");
    c.fingerprint = fmt::format("{:016x}", strings::HashString(*text));
    c.place = file->ranks[static_cast<size_t>(rank)];
    c.intra_host = algorithms::LinkCostOf(*file, "intra_host", c.intra_host);
    c.inter_host = algorithms::LinkCostOf(*file, "inter_host", c.inter_host);
    c.source = "file " + path;
    // The file names the hosts; an explicit CommOptions::host_id still wins.
    if (options.host_id.empty()) config.host_id = c.place.host;
    c.file = std::move(*file);
  } else {
    c.place = DetectedPlace();
  }
  c.place.rank = rank;
  c.place.host = config.host_id;
  return c;
}

// The address peers should connect to for this rank: CHOIR_LISTEN_ADDR, the
// topology file's ip or interface for it, CHOIR_SOCKET_IFNAME, or the source
// address of the route towards the store.
Result<std::string> ChooseListenAddress(const RankPlace& place) {
  const std::string forced = params::GetString(params::Id::kListenAddr);
  if (!forced.empty()) return forced;
  if (!place.ip.empty()) return place.ip;
  if (!place.interface.empty()) {
    auto iface = transport::FindInterface("=" + place.interface, transport::ListInterfaces());
    if (!iface.ok()) return iface.status().WithContext("the topology file's interface for rank " + std::to_string(place.rank));
    return iface->address;
  }
  const std::string ifname = params::GetString(params::Id::kSocketIfname);
  if (!ifname.empty()) {
    CHOIR_ASSIGN_OR_RETURN(transport::Interface iface,
                           transport::FindInterface(ifname, transport::ListInterfaces()));
    return iface.address;
  }
  std::string host = params::GetString(params::Id::kMasterAddr);
  const std::string store_addr = params::GetString(params::Id::kStoreAddr);
  int port = 0;
  if (!store_addr.empty()) net::SplitHostPort(store_addr, &host, &port).IgnoreError();
  auto source = transport::SourceAddressFor(host);
  return source.ok() ? *source : std::string("127.0.0.1");
}

json MakeHello(const CommConfig& c, int rank, int size, const std::string& address, const PlaceChoice& where) {
  const RankPlace& p = where.place;
  return json{{"protocol", kProtocolVersion},
              {"version", kVersionString},
              {"build", BuildString()},
              {"job", c.job_id},
              {"rank", rank},
              {"size", size},
              {"host", c.host_id},
              {"pid", static_cast<int>(getpid())},
              {"addr", address},
              {"netns", NetworkNamespace()},
              {"made_ns", NowNanos()},  // a retry's hello is younger than its failed try's failure
              {"transport", transport::TransportChoiceName(c.transport)},
              {"place", {{"package", p.package}, {"numa", p.numa}, {"cores", p.cores}, {"interface", p.interface}, {"ip", p.ip}}},
              // The CPUs this process may really run on (the place may come from a topology file).
              {"cpus", DetectedPlace().cores},
              {"topo", where.source == "detected" ? std::string() : where.fingerprint},
              {"topo_source", where.source},
              // Ranks of one host lay out and choose their same-host algorithms by these.
              {"shm", fmt::format("CHOIR_SHM_SLOT_BYTES={} CHOIR_SHM_PIPE_BYTES={}", params::GetBytes(params::Id::kShmSlotBytes),
                                  params::GetBytes(params::Id::kShmPipeBytes))}};
}

// The place a peer published (host: its host id).
RankPlace PlaceFromHello(const std::string& text, const transport::PeerInfo& peer) {
  RankPlace place;
  place.rank = peer.rank;
  place.host = peer.host_id;
  const json h = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (h.is_object() && h.contains("place") && h["place"].is_object()) {
    const json& p = h["place"];
    place.package = p.value("package", -1);
    place.numa = p.value("numa", -1);
    place.cores = p.value("cores", std::vector<int>{});
    place.interface = p.value("interface", std::string());
    place.ip = p.value("ip", std::string());
  }
  return place;
}

// Parses and checks a peer's hello against ours.
Result<transport::PeerInfo> CheckHello(const std::string& text, const json& mine, int expected_rank) {
  const json h = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string who = "rank " + std::to_string(expected_rank);
  if (h.is_discarded() || !h.is_object() || !h.contains("protocol") || !h["protocol"].is_number_integer()) {
    return Status(Code::kStoreProtocol, who + " published an unreadable hello: '" + text.substr(0, 200) + "'");
  }
  if (h["protocol"] != mine["protocol"]) {
    return Status(Code::kVersionMismatch,
                  who + " speaks choir protocol " + JsonDump(h["protocol"]) + " (choir " +
                      h.value("version", std::string("?")) + ") but this rank speaks " +
                      JsonDump(mine["protocol"]) + " (choir " + kVersionString +
                      "); install the same choir version everywhere");
  }
  try {
    if (h.at("version") != mine["version"]) {
      return Status(Code::kVersionMismatch, who + " runs choir " + h.at("version").get<std::string>() +
                                                " but this rank runs " + kVersionString +
                                                "; install the same choir version on every host");
    }
    if (h.at("job") != mine["job"]) {
      return Status(Code::kJobMismatch, who + " belongs to job '" + h.at("job").get<std::string>() +
                                            "' but this rank to '" + mine["job"].get<std::string>() +
                                            "'; two jobs share one store, or CHOIR_JOB_ID differs");
    }
    if (h.at("size") != mine["size"]) {
      return Status(Code::kInvalidWorldSize, who + " was started with world size " + JsonDump(h.at("size")) +
                                                 " but this rank with " + JsonDump(mine["size"]));
    }
    if (h.value("topo", std::string()) != mine["topo"]) {
      auto describe = [](const json& j) {
        const std::string src = j.value("topo_source", std::string("detected"));
        return src == "detected" ? std::string("detects its place (no CHOIR_TOPO_FILE)")
                                 : "reads " + src + " (fingerprint " + j.value("topo", std::string()) + ")";
      };
      return Status(Code::kClusterMismatch, who + " " + describe(h) + " but this rank " + describe(mine) +
                                                "; give every rank the same CHOIR_TOPO_FILE");
    }
    if (h.value("host", std::string()) == mine["host"] && h.value("shm", std::string()) != mine["shm"]) {
      return Status(Code::kClusterMismatch, who + " on this host uses " + h.value("shm", std::string("?")) +
                                                " but this rank " + mine["shm"].get<std::string>() +
                                                "; give every rank of a host the same values");
    }
    if (h.at("build") != mine["build"]) {
      CHOIR_LOG(Warn, INIT, "{} was built as '{}', this rank as '{}'", who,
                h.at("build").get<std::string>(), mine["build"].get<std::string>());
    }
    transport::PeerInfo p;
    p.rank = h.at("rank").get<int>();
    if (p.rank != expected_rank) {
      return Status(Code::kStoreProtocol, "hello of rank " + std::to_string(expected_rank) +
                                              " claims rank " + std::to_string(p.rank));
    }
    p.host_id = h.at("host").get<std::string>();
    p.pid = h.at("pid").get<int>();
    p.address = h.at("addr").get<std::string>();
    p.net_ns = h.value("netns", std::string());
    const std::string t = h.at("transport").get<std::string>();
    p.choice = t == "tcp" ? transport::TransportChoice::kTcp
                          : t == "shm" ? transport::TransportChoice::kShm : transport::TransportChoice::kAuto;
    return p;
  } catch (const json::exception& e) {
    return Status(Code::kStoreProtocol, who + " published a hello with a missing or wrong field: " + e.what());
  }
}

// A rank's real CPU affinity from its hello (empty: not given).
std::vector<int> CpusFromHello(const std::string& text) {
  const json h = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!h.is_object() || !h.contains("cpus") || !h["cpus"].is_array()) return {};
  std::vector<int> cpus;
  for (const json& c : h["cpus"]) {
    if (!c.is_number_integer()) return {};
    cpus.push_back(c.get<int>());
  }
  return cpus;
}

// The host's online CPUs: the same number in every process of the host
// (unlike a process's own affinity), so that every local rank reaches the
// same verdict on sharing cores when some rank's CPUs are unknown.
int HostCpus() { return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)); }

}  // namespace

Status CommImpl::CheckOptions(const CommOptions& options) { return ResolveConfig(options).status(); }

Result<std::unique_ptr<CommImpl>> CommImpl::Create(std::shared_ptr<Store> store, int rank, int size,
                                                   const CommOptions& options, const InheritedPlace* inherited) {
  if (store == nullptr) return InvalidArgument("Communicator::Create needs a store, got null");
  JoinStanding at{.size = size, .rank = rank};
  auto made = Join(store, rank, size, options, inherited, &at);
  if (made.ok() || !IsJoinFailureToReport(made.status())) return made;
  // The other ranks would wait for this one until their timeout: tell them why.
  if (at.name.empty()) at.name = options.name.empty() ? "world" : options.name;
  if (at.name.size() > kMaxCommNameBytes) return made;  // not a name the store takes
  if (at.position < 0) {
    const Result<int64_t> joined = store->Add("choir/" + at.name + "/joined", 0);
    if (!joined.ok()) return made;
    at.position = *joined;
  }
  // Without a world size there is no telling which keys the others wait for.
  if (size < 1 || size > topology::kMaxWorldSize) return made;
  if ((rank < 0 || rank >= size) && at.position > 0) {
    // A process outside its world takes no position. When the last process
    // to join was started with another world size, that is the likelier
    // mistake: say so.
    const auto last = ReadJoinSize(*store, at.name, at.position - 1, std::chrono::milliseconds(500), Deadline::Infinite());
    // Only when its world is still forming and has room for this rank:
    // else the advice would name the wrong peers.
    if (last.ok() && last->has_value() && (*last)->size != size && at.position % (*last)->size != 0 &&
        rank < (*last)->size) {
      made = Status(made.status().code(),
                    fmt::format("{}; the last process to join communicator '{}', {}, was started as one of {} ranks "
                                "and this one as one of {}: give it the world size of its peers (WORLD_SIZE)",
                                made.status().message(), at.name, (*last)->who, (*last)->size, size));
    }
  }
  at.host = HostName();
  at.where = NetworkNamespace();
  ReportJoinFailure(store, at, made.status());
  return made;
}

Result<std::unique_ptr<CommImpl>> CommImpl::Join(const std::shared_ptr<Store>& store, int rank, int size,
                                                 const CommOptions& options, const InheritedPlace* inherited,
                                                 JoinStanding* at) {
  const int64_t join_start = NowNanos();
  const std::string where_ns = NetworkNamespace();
  if (size < 1 || size > topology::kMaxWorldSize) {
    return Status(Code::kInvalidWorldSize, fmt::format("world size must be 1 to {}, got {}", topology::kMaxWorldSize, size));
  }
  if (rank < 0 || rank >= size) {
    return Status(Code::kInvalidRank, "rank " + std::to_string(rank) + " is outside [0, " +
                                          std::to_string(size) + ")");
  }
  CHOIR_ASSIGN_OR_RETURN(CommConfig config, ResolveConfig(options));
  at->name = config.name;
  WarnUnknownSettingsOnce();
  CHOIR_ASSIGN_OR_RETURN(PlaceChoice where, ChoosePlace(options, inherited, rank, size, config));
  const int64_t start = NowNanos();
  const Deadline deadline = Deadline::AfterSeconds(config.timeout_seconds);

  // Each incarnation of a communicator name gets its own key space.
  CHOIR_ASSIGN_OR_RETURN(int64_t joined, store->Add("choir/" + config.name + "/joined", 1));
  at->position = joined - 1;
  // Ranks started with other world sizes would compute other incarnations
  // and wait for each other until their timeout (comm/join_sizes.h).
  CHOIR_RETURN_IF_ERROR(PublishJoinSize(*store, config.name, at->position, rank, size, HostName()));
  // Before the claim: a conflict also puts ranks into incarnations whose
  // ranks are taken, and the rank-given-twice error would name the wrong cause.
  JoinSizeConflict conflict;
  if (Status sized = CheckSizeOfRankBefore(*store, config.name, at->position, rank, size, deadline, &conflict);
      !sized.ok()) {
    at->conflict = sized.code() == Code::kInvalidWorldSize;
    at->other_size = conflict.size;
    at->other_incarnation = conflict.incarnation;
    return sized.WithContext("rank " + std::to_string(rank) + " joining communicator '" + config.name + "'");
  }
  config.uid = config.name + "#" + std::to_string((joined - 1) / size);
  auto scoped = NewPrefixStore("choir/" + config.uid, store);

  CHOIR_ASSIGN_OR_RETURN(std::string address, ChooseListenAddress(where.place));
  CHOIR_ASSIGN_OR_RETURN(Fd listener, net::Listen(address, 0, 4096));
  const std::string listen_at = address + ":" + std::to_string(net::LocalPort(listener.get()));
  const json hello = MakeHello(config, rank, size, listen_at, where);
  std::string hello_text;
  try {
    hello_text = hello.dump();
  } catch (const json::exception&) {
    // Every rank would read its own hello back changed and call it another job.
    return Status(Code::kInvalidSetting,
                  "rank " + std::to_string(rank) +
                      ": the job id (CHOIR_JOB_ID), host id (CHOIR_HOST_ID) or communicator name is not UTF-8 "
                      "text; give ids of printable characters");
  }
  // Two processes given the same rank would overwrite each other's hello and
  // leave the job waiting for the rank nobody has: the second one to claim it
  // says so at once, and the first one's timeout names it.
  const std::string claim_key = "claim/" + std::to_string(rank);
  CHOIR_ASSIGN_OR_RETURN(const int64_t claims, scoped->Add(claim_key, 1));
  if (claims > 1) {
    at->twice = true;
    return Status(Code::kInvalidRank,
                  fmt::format("rank {} of communicator '{}' was already taken by another process: two processes "
                              "were started with the same rank (RANK={}); give every process its own rank and "
                              "restart the job",
                              rank, config.name, rank));
  }
  CHOIR_RETURN_IF_ERROR(scoped->Set("hello/" + std::to_string(rank), hello_text));
  at->hello_published = true;

  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("hello/" + std::to_string(r));
  // A store call takes at most 65536 keys (choir/store.h): larger worlds wait in parts.
  constexpr size_t kKeysPerWait = size_t{1} << 16;
  Status waited;
  for (size_t first = 0; first < keys.size() && waited.ok(); first += kKeysPerWait) {
    const auto part = std::span(keys).subspan(first, std::min(kKeysPerWait, keys.size() - first));
    waited = scoped->Wait(std::vector<std::string>(part.begin(), part.end()), deadline.RemainingMillis());
  }
  if (!waited.ok() && waited.code() != Code::kStoreTimeout) {
    return waited.WithContext("rank " + std::to_string(rank) + " joining communicator '" + config.name + "'");
  }
  if (!waited.ok()) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      auto have = scoped->Check({keys[static_cast<size_t>(r)]});
      if (have.ok() && !*have) missing.push_back(r);
    }
    std::string list = strings::FormatRanks(missing);  // ranges: a world of 100000 ranks stays readable
    if (list.size() > 400) {
      const size_t cut = list.rfind(',', 400);
      list = fmt::format("{} and more ({} in all)", list.substr(0, cut), missing.size());
    }
    if (missing.empty()) {
      return waited.WithContext("rank " + std::to_string(rank) + " joining communicator '" + config.name + "'");
    }
    const Result<int64_t> claims_now = scoped->Add(claim_key, 0);
    const std::string twice =
        claims_now.ok() && *claims_now > 1
            ? fmt::format("; and another process was started as rank {} too (RANK given twice?)", rank)
            : "";
    return Status(Code::kStoreTimeout,
                  "rank " + std::to_string(rank) + ": rank(s) " + list + " of " + std::to_string(size) +
                      " never joined communicator '" + config.name + "' within " +
                      fmt::format("{:.1f}", config.timeout_seconds) +
                      " s; they did not start, crashed before rendezvous, or use another store "
                      "address or WORLD_SIZE" + twice + RecentJoinFailures(*store, config.name));
  }
  std::vector<transport::PeerInfo> peers;
  std::vector<RankPlace> places;
  std::vector<std::vector<int>> local_cpus;  // each local rank's CPU affinity (empty: unknown)
  for (int r = 0; r < size; ++r) {
    // A rank that could not join left its failure where the hellos go
    // (transport/join_failure.h).
    Result<std::string> got = ReadHello(*store, *scoped, config.name, size, rank, r, where_ns, join_start, deadline,
                                        config.timeout_seconds);
    if (!got.ok()) {
      return got.status().WithContext("rank " + std::to_string(rank) + " joining communicator '" + config.name + "'");
    }
    const std::string& text = *got;
    CHOIR_ASSIGN_OR_RETURN(transport::PeerInfo p, CheckHello(text, hello, r));
    places.push_back(PlaceFromHello(text, p));
    if (p.host_id == config.host_id) local_cpus.push_back(CpusFromHello(text));
    peers.push_back(std::move(p));
  }
  transport::ConnectOptions co;
  co.job_id = config.job_id;
  co.comm_uid = config.uid;
  co.deadline = deadline;
  co.ring_bytes = params::GetBytes(params::Id::kShmRingBytes);
  co.tcp_chunk_bytes = params::GetBytes(params::Id::kTcpChunkBytes);
  co.area_slot_bytes = params::GetBytes(params::Id::kShmSlotBytes);
  co.area_pipe_bytes = params::GetBytes(params::Id::kShmPipeBytes);
  co.tcp_streams = static_cast<int>(params::GetInt(params::Id::kTcpStreams));  // 1..64 (the settings table)
  co.tcp_stripe_bytes = params::GetBytes(params::Id::kTcpStripeBytes);
  co.allow_cma = params::GetString(params::Id::kShmCma) != "off";
  const bool oversubscribed = transport::RanksCompeteForCpus(local_cpus, HostCpus());
  // Ranks that outnumber the cores must never burn a core a peer needs.
  co.wait.spin_ns = oversubscribed ? 0 : params::GetInt(params::Id::kSpinMicros) * 1000;
  co.wait.yield_ns = co.wait.spin_ns + params::GetInt(params::Id::kYieldMicros) * 1000;
  co.ranks_share_cpus = oversubscribed;
  const algorithms::SwitchTable table = algorithms::ConfiguredSwitchTable();
  co.tuning = algorithms::SwitchTableName(table);
  // The copy rule measured with that table's host (kernels/reduce.h,
  // CopyMisaligned); process-wide, so the last communicator created sets it.
  kernels::SetMisalignedCopyRule(table == algorithms::SwitchTable::kAmdZen4);
  co.cache_bytes = topology::CacheBytes(2);
  co.comm_name = config.name;
  co.watch = [scoped, name = config.name] { return CheckJoinFailed(*scoped, name); };
  auto endpoint = transport::ConnectPeers(*scoped, rank, peers, std::move(listener), co);
  if (!endpoint.ok()) {
    // Waiting for a peer that failed can end in its closed connection or
    // listener first (PeerLost, refused, timed out): its failure explains
    // more. An error of this rank's own stands.
    if (!IsJoinFailureToReport(endpoint.status())) {
      if (Status told = CheckJoinFailed(*scoped, config.name); !told.ok()) return told;
    }
    return endpoint.status();
  }

  auto impl = std::unique_ptr<CommImpl>(new CommImpl(store, scoped, rank, size, std::move(config)));
  std::vector<std::string> host_names;
  for (const auto& p : peers) host_names.push_back(p.host_id);
  impl->layout_ = algorithms::Layout::FromHostNames(host_names);
  if (where.file && options.host_id.empty()) {
    impl->topology_ = std::move(*where.file);
  } else {
    impl->topology_ = topology::AssembleTopology(std::move(places), where.source);
    for (LinkClass& l : impl->topology_.links) {
      const algorithms::LinkCost* cost = l.name == "intra_host" ? &where.intra_host
                                         : l.name == "inter_host" ? &where.inter_host : nullptr;
      if (cost != nullptr) l = LinkClass{l.name, cost->bandwidth_bps / 1e9, cost->latency_s * 1e6};
    }
  }
  impl->topo_fingerprint_ = where.fingerprint;
  impl->intra_host_cost_ = where.intra_host;
  impl->inter_host_cost_ = where.inter_host;
  impl->peers_ = std::move(peers);
  impl->endpoint_ = std::move(*endpoint);
  impl->metrics_ = diag::RegisterComm(impl->config_.job_id, impl->config_.uid, rank, size, impl->config_.time_one_in);
  impl->endpoint_->set_metrics(impl->metrics_.get());
  // A thread that waits for a pending send or receive rouses the task that
  // drives them in the background, so that it gives the engine back.
  impl->engine_->set_wake([raw = impl.get()] {
    if (raw->p2p_pending_.load(std::memory_order_seq_cst)) raw->endpoint_->Wake();
  });
  // A rank's progress thread may have no CPU of its own: the rank is bound
  // to one CPU (as `choir run` binds ranks when there are cores for them
  // all), or the host's ranks, each counted as two threads (caller and
  // progress thread) spread over its CPU affinity, load some CPU with more
  // than one (unbound ranks on a small host, as torchrun starts them). Its
  // hand-offs then cost context switches on CPUs the callers need, so a
  // caller that waits runs its operation itself (comm/engine.h). Two unbound
  // ranks on 2 CPUs, allreduce in place, paired time ratios: 0.51x at 512
  // KiB, 0.78x at 1 MiB, 0.87x-0.90x at 2-4 MiB (near the bound ranks'
  // figures); torch.distributed.all_reduce 1.2x-2.3x faster at 512 KiB-4
  // MiB (docs/performance-log.md, "The Zen 4 host, a seventh session").
  std::vector<int> my_cpus;
  const bool one_cpu = topology::AffinityCpus(&my_cpus) && my_cpus.size() == 1;
  const bool progress_shares =
      one_cpu || transport::RanksCompeteForCpus(local_cpus, HostCpus(), /*threads_per_rank=*/2);
  impl->engine_->set_shares_cpu(progress_shares);
  CHOIR_RETURN_IF_ERROR(diag::EnsureMetricsEndpoint({impl->config_.job_id, rank, size, impl->config_.host_id}));
  CHOIR_LOG(Info, INIT, "rank {}/{} joined '{}' in {:.1f} ms ({} local ranks, {} hosts, topology {}{})", rank,
            size, impl->config_.uid, static_cast<double>(NowNanos() - start) / 1e6, local_cpus.size(),
            impl->layout_.num_hosts(), where.source,
            oversubscribed ? ", oversubscribed: no spinning, queued operations wait for their caller"
                           : (progress_shares ? ", no CPU for the progress thread: queued operations wait for "
                                                "their caller"
                                              : ""));
  return impl;
}

}  // namespace choir::comm
