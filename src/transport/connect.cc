#include "transport/connect.h"

#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "base/logging.h"
#include "base/socket.h"
#include "base/strings.h"
#include "choir/version.h"
#include "transport/join_failure.h"
#include "transport/shm/shm_channel.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/tcp_channel.h"

namespace choir::transport {

const char* TransportChoiceName(TransportChoice c) {
  switch (c) {
    case TransportChoice::kAuto: return "auto";
    case TransportChoice::kTcp: return "tcp";
    case TransportChoice::kShm: return "shm";
  }
  return "?";
}

Result<bool> PairUsesShm(const PeerInfo& a, const PeerInfo& b) {
  const bool same_host = a.host_id == b.host_id;
  for (const PeerInfo* p : {&a, &b}) {
    if (p->choice == TransportChoice::kShm && !same_host) {
      const PeerInfo* other = p == &a ? &b : &a;
      return Status(Code::kInvalidSetting,
                    "rank " + std::to_string(p->rank) + " forces CHOIR_TRANSPORT=shm but rank " +
                        std::to_string(other->rank) + " is on another host ('" + other->host_id +
                        "' vs '" + p->host_id + "'); use auto or tcp for multi-host jobs");
    }
  }
  if (a.choice == TransportChoice::kTcp || b.choice == TransportChoice::kTcp) return false;
  return same_host;
}

namespace {

HandshakeHello MakeHello(const ConnectOptions& o, int from, int to, int stream) {
  HandshakeHello h;
  h.stream = stream;
  h.streams = o.tcp_streams;
  h.protocol = static_cast<uint32_t>(kProtocolVersion);
  h.job_hash = strings::HashString(o.job_id);
  h.comm_hash = strings::HashString(o.comm_uid);
  h.from_rank = from;
  h.to_rank = to;
  CopyTruncated(h.job, sizeof(h.job), o.job_id);
  CopyTruncated(h.comm, sizeof(h.comm), o.comm_uid);
  return h;
}

struct ShmPlan {
  // shm_peers[r]: sorted ranks (including r) that rank r shares memory with.
  std::vector<std::vector<int>> shm_peers;
  int SlotOf(int owner, int writer) const {
    const auto& v = shm_peers[static_cast<size_t>(owner)];
    return static_cast<int>(std::find(v.begin(), v.end(), writer) - v.begin());
  }
};

Result<ShmPlan> PlanShm(const std::vector<PeerInfo>& peers) {
  ShmPlan plan;
  const size_t n = peers.size();
  plan.shm_peers.resize(n);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      bool shm = a == b;
      if (a != b) {
        CHOIR_ASSIGN_OR_RETURN(shm, PairUsesShm(peers[a], peers[b]));
      }
      if (shm) plan.shm_peers[a].push_back(static_cast<int>(b));
    }
  }
  return plan;
}

bool IsLoopback(const std::string& address) { return address.rfind("127.", 0) == 0; }

// A rank that listens on a loopback address cannot be reached from another
// host: say so before anyone waits for a connection that cannot happen (the
// field's "picked lo/docker0" failure).
Status CheckReachable(const std::vector<PeerInfo>& peers, int rank) {
  const PeerInfo& me = peers[static_cast<size_t>(rank)];
  for (const PeerInfo& p : peers) {
    // Same kernel and network namespace: loopback reaches (several emulated hosts on one machine).
    if (p.rank == rank || p.host_id == me.host_id || (!p.net_ns.empty() && p.net_ns == me.net_ns)) continue;
    const PeerInfo* local = IsLoopback(me.address) ? &me : IsLoopback(p.address) ? &p : nullptr;
    if (local == nullptr) continue;
    const PeerInfo& other = local == &me ? p : me;
    return Status(Code::kInterfaceNotFound,
                  fmt::format("rank {} listens on the loopback address {}, which rank {} on host '{}' "
                              "cannot reach; choose a routable interface with CHOIR_SOCKET_IFNAME (e.g. "
                              "eth0, or ^lo,docker to exclude), or set MASTER_ADDR to an address of "
                              "the rendezvous host that every host can reach",
                              local->rank, local->address, other.rank, other.host_id));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Endpoint>> ConnectPeers(Store& store, int rank,
                                               const std::vector<PeerInfo>& peers, Fd listener,
                                               const ConnectOptions& options) {
  const int n = static_cast<int>(peers.size());
  const Deadline deadline = options.deadline;
  CHOIR_RETURN_IF_ERROR(Segment::CheckSizes(options.ring_bytes, options.area_slot_bytes, options.area_pipe_bytes));
  CHOIR_ASSIGN_OR_RETURN(ShmPlan plan, PlanShm(peers));
  CHOIR_RETURN_IF_ERROR(CheckReachable(peers, rank));
  const std::vector<int>& my_shm = plan.shm_peers[static_cast<size_t>(rank)];
  std::vector<std::unique_ptr<Channel>> channels(static_cast<size_t>(n));

  // 1. Shared memory: create our segment (the rings other local ranks write to us).
  std::unique_ptr<Segment> own;
  if (my_shm.size() > 1) {
    std::random_device rd;
    const uint64_t token = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
    CHOIR_RETURN_IF_ERROR(Segment::CheckRoom(static_cast<int>(my_shm.size()), options.ring_bytes,
                                             options.area_slot_bytes, options.area_pipe_bytes)
                              .WithContext("rank " + std::to_string(rank)));
    const std::string name = Segment::NameFor(options.job_id + "/" + options.comm_uid, rank, getpid());
    CHOIR_ASSIGN_OR_RETURN(own, Segment::Create(name, rank, static_cast<int>(my_shm.size()),
                                                options.ring_bytes, options.area_slot_bytes,
                                                options.area_pipe_bytes, token));
    CHOIR_RETURN_IF_ERROR(store.Set("shm/" + std::to_string(rank), fmt::format("{} {:016x}", name, token)));
  }

  // 2. TCP: connect to every lower-ranked TCP peer and send our hello. The
  // kernel completes the connection from the listen backlog, so this never
  // waits for the peer's own progress.
  std::vector<int> lower, higher;
  for (int p = 0; p < n; ++p) {
    if (p == rank || std::find(my_shm.begin(), my_shm.end(), p) != my_shm.end()) continue;
    (p < rank ? lower : higher).push_back(p);
  }
  const int streams = std::max(1, options.tcp_streams);
  // lower_fds[i][k]: stream k to lower[i].
  std::vector<std::vector<Fd>> lower_fds(lower.size());
  for (size_t i = 0; i < lower.size(); ++i) {
    const PeerInfo& peer = peers[static_cast<size_t>(lower[i])];
    std::string host;
    int port = 0;
    CHOIR_RETURN_IF_ERROR(net::SplitHostPort(peer.address, &host, &port));
    for (int k = 0; k < streams; ++k) {
      // In slices when there is a watch, so that a peer's failure ends the wait.
      Result<Fd> fd = Status(Code::kConnectTimeout, "");
      while (true) {
        fd = net::Connect(host, port, options.watch ? Deadline::Earlier(deadline, Deadline::AfterSeconds(1)) : deadline);
        const bool slice_over = !fd.ok() && (fd.status().code() == Code::kConnectRefused ||
                                              fd.status().code() == Code::kConnectTimeout);
        if (!slice_over || !options.watch || deadline.Expired()) break;
        CHOIR_RETURN_IF_ERROR(options.watch());
      }
      if (!fd.ok()) {
        return fd.status().WithContext("rank " + std::to_string(rank) + " connecting to rank " +
                                       std::to_string(peer.rank) + " at " + peer.address +
                                       " (check that this address is reachable from here, or pick "
                                       "the interface with CHOIR_SOCKET_IFNAME)");
      }
      CHOIR_RETURN_IF_ERROR(SendHello(fd->get(), MakeHello(options, rank, peer.rank, k), deadline));
      lower_fds[i].push_back(std::move(*fd));
    }
  }

  auto prepare = [](Fd& fd) -> Status {
    CHOIR_RETURN_IF_ERROR(net::SetNoDelay(fd.get()));
    net::SetBufferSizes(fd.get(), 4 << 20);
    return net::SetNonBlocking(fd.get(), true);
  };

  // 3. TCP: accept every stream of every higher-ranked peer.
  std::vector<std::vector<Fd>> accepted(static_cast<size_t>(n));
  std::vector<int> arrived(static_cast<size_t>(n), 0);
  for (int p : higher) accepted[static_cast<size_t>(p)].resize(static_cast<size_t>(streams));
  size_t pending = higher.size() * static_cast<size_t>(streams);
  while (pending > 0) {
    // In slices when there is a watch, so that a peer's report ends the wait.
    const Deadline slice = options.watch ? Deadline::Earlier(deadline, Deadline::AfterSeconds(1)) : deadline;
    auto fd = net::Accept(listener.get(), slice);
    if (!fd.ok() && options.watch && fd.status().code() == Code::kConnectTimeout && !deadline.Expired()) {
      CHOIR_RETURN_IF_ERROR(options.watch());
      continue;
    }
    if (!fd.ok()) {
      std::vector<int> missing;
      for (int p : higher) {
        if (arrived[static_cast<size_t>(p)] < streams) missing.push_back(p);
      }
      return Status(Code::kConnectTimeout,
                    "rank " + std::to_string(rank) + " waited for connections from rank(s) " +
                        strings::FormatRanks(missing) + " at " + peers[static_cast<size_t>(rank)].address +
                        " until the deadline; they crashed during start-up or cannot reach this "
                        "address (wrong interface: set CHOIR_SOCKET_IFNAME)");
    }
    int from = -1, stream = -1;
    const Deadline hello_deadline = Deadline::Earlier(deadline, Deadline::AfterSeconds(10));
    Status s = AcceptHello(fd->get(), MakeHello(options, -1, rank, 0), &from, &stream, hello_deadline);
    if (s.code() == Code::kInvalidSetting) return s;  // our own job is misconfigured: stop
    const bool fits = s.ok() && from > rank && from < n &&
                      std::find(higher.begin(), higher.end(), from) != higher.end() &&
                      !accepted[static_cast<size_t>(from)][static_cast<size_t>(stream)].valid();
    if (!fits) {
      // A stray or foreign connection: refuse it and keep waiting for our peers.
      CHOIR_LOG(Warn, TCP, "rank {}: refused a connection from {}: {}", rank,
                net::PeerAddress(fd->get()), s.ok() ? "unexpected rank or stream" : s.ToString());
      continue;
    }
    CHOIR_RETURN_IF_ERROR(prepare(*fd));
    auto& slots = accepted[static_cast<size_t>(from)];
    slots[static_cast<size_t>(stream)] = std::move(*fd);
    --pending;
    if (++arrived[static_cast<size_t>(from)] == streams) {
      channels[static_cast<size_t>(from)] = std::make_unique<TcpChannel>(
          std::move(slots), from, peers[static_cast<size_t>(from)].address, options.tcp_chunk_bytes,
          options.tcp_stripe_bytes);
    }
  }

  // 4. TCP: the lower peers' answers.
  for (size_t i = 0; i < lower.size(); ++i) {
    const PeerInfo& peer = peers[static_cast<size_t>(lower[i])];
    for (Fd& fd : lower_fds[i]) {
      CHOIR_RETURN_IF_ERROR(ReadReply(fd.get(), peer.rank, peer.address, deadline));
      CHOIR_RETURN_IF_ERROR(prepare(fd));
    }
    channels[static_cast<size_t>(peer.rank)] = std::make_unique<TcpChannel>(
        std::move(lower_fds[i]), peer.rank, peer.address, options.tcp_chunk_bytes, options.tcp_stripe_bytes);
  }

  // 5. Shared memory: map the segments of our local peers.
  std::vector<std::unique_ptr<Segment>> peer_segments;
  for (int p : my_shm) {
    if (p == rank) continue;
    const std::string key = "shm/" + std::to_string(p);
    auto value = store.WaitGet(key, deadline.RemainingMillis());
    if (!value.ok()) return value.status().WithContext("waiting for rank " + std::to_string(p) + "'s shared-memory segment");
    if (const auto failed = ParseJoinFailure(*value)) return JoinFailureStatus(*failed, options.comm_name);
    const size_t space = value->find(' ');
    const std::string hex = space == std::string::npos ? "" : value->substr(space + 1);
    char* end = nullptr;
    const uint64_t token = std::strtoull(hex.c_str(), &end, 16);
    if (hex.size() != 16 || end != hex.c_str() + hex.size()) {
      return Status(Code::kStoreProtocol, "malformed store value for " + key + ": '" + *value + "'");
    }
    CHOIR_ASSIGN_OR_RETURN(auto seg, Segment::Open(value->substr(0, space), p, token));
    channels[static_cast<size_t>(p)] = std::make_unique<ShmChannel>(
        p, peers[static_cast<size_t>(p)].pid, own.get(), seg.get(), plan.SlotOf(p, rank),
        plan.SlotOf(rank, p));
    peer_segments.push_back(std::move(seg));
  }

  // 6. Can we read local peers' memory directly (process_vm_readv)? Blocked
  // by seccomp in many containers and by ptrace restrictions on some hosts.
  bool cma_ok = options.allow_cma;
  for (const auto& seg : peer_segments) {
    if (!cma_ok) break;
    uint64_t magic = 0;
    iovec local{&magic, sizeof(magic)};
    iovec remote{reinterpret_cast<void*>(seg->header()->self_addr), sizeof(magic)};
    const ssize_t got = process_vm_readv(seg->header()->pid, &local, 1, &remote, 1, 0);
    cma_ok = got == static_cast<ssize_t>(sizeof(magic)) && magic == kSegmentMagic;
    if (!cma_ok) {
      CHOIR_LOG(Info, SHM, "rank {}: process_vm_readv to rank {} not allowed ({}); large same-host "
                "transfers take the ring path", rank, seg->header()->rank, std::strerror(errno));
    }
  }

  // 7. Everyone is connected and mapped: segment names can go. The local
  // ranks also agree on single copy, the switch-point table and the cache
  // size that bounds the pipe's chunks.
  const Readiness mine{cma_ok, options.tuning, options.cache_bytes};
  CHOIR_RETURN_IF_ERROR(store.Set("ready/" + std::to_string(rank), FormatReadiness(mine)));
  std::vector<int> local_peers;
  for (int p : my_shm) {
    if (p != rank) local_peers.push_back(p);
  }
  Readiness group_ready = mine;
  int other_tuning_rank = -1;  // a local peer that names another switch-point table
  std::string other_tuning;
  if (!local_peers.empty()) {
    std::vector<std::string> keys;
    for (int p : local_peers) keys.push_back("ready/" + std::to_string(p));
    Status s = store.Wait(keys, deadline.RemainingMillis());
    if (!s.ok()) return s.WithContext("waiting for local ranks to map their shared-memory segments");
    for (size_t i = 0; i < local_peers.size(); ++i) {
      const int p = local_peers[i];
      auto v = store.Get(keys[i]);
      if (!v.ok()) return v.status().WithContext("reading rank " + std::to_string(p) + "'s readiness");
      if (const auto failed = ParseJoinFailure(*v)) return JoinFailureStatus(*failed, options.comm_name);
      CHOIR_ASSIGN_OR_RETURN(const Readiness theirs, ParseReadiness(*v));
      group_ready.cma = group_ready.cma && theirs.cma;
      group_ready.cache_bytes = std::min(group_ready.cache_bytes, theirs.cache_bytes);
      if (theirs.tuning != options.tuning && other_tuning_rank < 0) {
        other_tuning_rank = p;
        other_tuning = theirs.tuning;
      }
    }
  }

  // 8. The same-host group, when every local rank shares memory with every other.
  std::unique_ptr<LocalGroup> group;
  bool transitive = my_shm.size() > 1;
  for (int p : my_shm) transitive = transitive && plan.shm_peers[static_cast<size_t>(p)] == my_shm;
  if (transitive && other_tuning_rank >= 0) {
    // Their same-host choices would differ for one call: stop every one of them.
    return Status(Code::kInvalidSetting,
                  fmt::format("rank {} uses the '{}' same-host switch points but rank {} on the same host uses "
                              "'{}': set CHOIR_SHM_TUNING to the same value on every rank (or leave it at auto and run "
                              "the same choir version everywhere: versions may resolve auto differently)",
                              rank, options.tuning, other_tuning_rank, other_tuning));
  }
  if (transitive) {
    group = std::make_unique<LocalGroup>();
    group->ranks = my_shm;
    group->cma = group_ready.cma;
    group->ranks_share_cpus = options.ranks_share_cpus;
    group->tuning = options.tuning;
    group->pipe_cache_bytes = group_ready.cache_bytes;
    group->pipe_steps.assign(my_shm.size(), 0);
    size_t next_peer = 0;
    for (size_t i = 0; i < my_shm.size(); ++i) {
      const int p = my_shm[i];
      Segment* seg = p == rank ? own.get() : peer_segments[next_peer++].get();
      if (p == rank) group->index = static_cast<int>(i);
      group->areas.push_back(seg->area());
      group->headers.push_back(seg->header());
      group->pids.push_back(seg->header()->pid);
    }
  }

  auto ep = std::make_unique<Endpoint>(rank, n, std::move(channels), std::move(own),
                                       std::move(peer_segments), options.wait);
  ep->set_local(std::move(group));
  ep->UnlinkSegment();
  CHOIR_LOG(Debug, INIT, "rank {}: {} shm peers, {} tcp peers", rank, my_shm.size() - 1,
            lower.size() + higher.size());
  return ep;
}

std::string FormatReadiness(const Readiness& r) {
  return fmt::format("cma={} tuning={} l2={}", r.cma ? 1 : 0, r.tuning, r.cache_bytes);
}

Result<Readiness> ParseReadiness(const std::string& value) {
  Readiness r;
  bool cma = false, tuning = false, l2 = false;
  for (const std::string& field : strings::Split(value, ' ')) {
    const size_t eq = field.find('=');
    const std::string key = field.substr(0, eq);
    const std::string v = eq == std::string::npos ? "" : field.substr(eq + 1);
    if (key == "cma" && (v == "0" || v == "1")) {
      r.cma = v == "1";
      cma = true;
    } else if (key == "tuning" && !v.empty()) {
      r.tuning = v;
      tuning = true;
    } else if (const auto bytes = strings::ParseInt(v); key == "l2" && bytes && *bytes >= 0) {
      r.cache_bytes = static_cast<size_t>(*bytes);
      l2 = true;
    }
  }
  if (!cma || !tuning || !l2) {
    return Status(Code::kStoreProtocol, "malformed shared-memory readiness '" + value +
                                            "' (expected 'cma=0|1 tuning=NAME l2=BYTES'): is every rank the same "
                                            "choir version?");
  }
  return r;
}

}  // namespace choir::transport
