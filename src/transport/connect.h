// Building a rank's Endpoint: choosing a transport per peer pair, creating
// and mapping shared-memory segments, and connecting TCP links with the
// handshake.
//
// Pairs on the same host (same host id) use shared memory unless either side
// forces tcp; all other pairs use TCP. Both sides compute the same choice from
// the same published facts, so they always agree.
//
// Thread-safety: ConnectPeers is called once per communicator by its creator.
#ifndef CHOIR_TRANSPORT_CONNECT_H_
#define CHOIR_TRANSPORT_CONNECT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/fd.h"
#include "choir/status.h"
#include "choir/store.h"
#include "transport/endpoint.h"

namespace choir::transport {

enum class TransportChoice { kAuto, kTcp, kShm };
const char* TransportChoiceName(TransportChoice c);

// What every rank publishes about itself before links are made.
struct PeerInfo {
  int rank = -1;
  std::string host_id;
  int pid = 0;
  std::string address;  // "ip:port" of its TCP listener
  std::string net_ns;   // kernel boot id + network namespace: who can reach whose loopback
  TransportChoice choice = TransportChoice::kAuto;
};

struct ConnectOptions {
  std::string job_id;
  std::string comm_uid;   // unique per communicator incarnation
  std::string comm_name;  // the communicator's name (in errors)
  Deadline deadline = Deadline::Infinite();
  size_t ring_bytes = 2 << 20;
  size_t area_slot_bytes = 64 << 10;
  size_t area_pipe_bytes = 4 << 20;
  bool allow_cma = true;
  size_t tcp_chunk_bytes = 512 << 10;
  int tcp_streams = 1;               // sockets per peer pair
  size_t tcp_stripe_bytes = 512 << 10;  // payloads this large are spread over the streams
  WaitPolicy wait;
  // This host's ranks compete for CPUs (RanksCompeteForCpus); the same on
  // every local rank, so same-host algorithm choices that depend on it agree.
  bool ranks_share_cpus = false;
  // Name of the same-host switch-point table (CHOIR_SHM_TUNING resolved,
  // algorithms/switch_points.h); every local rank must name the same.
  std::string tuning = "intel";
  // This rank's L2 cache bytes (0: unknown), which bound shm_pipe's chunks;
  // the host's ranks use the smallest, so that their chunks agree.
  size_t cache_bytes = 0;
  // Called about every second while waiting for a TCP connection to or
  // from a peer; an error ends the wait with it (a peer that could not join:
  // transport/join_failure.h). Store values that are failures end the store
  // waits.
  std::function<Status()> watch;
};

// What a rank tells its local peers once it has mapped their segments
// (store key ready/<rank>): "cma=1 tuning=amd l2=524288".
struct Readiness {
  bool cma = false;
  std::string tuning;
  size_t cache_bytes = 0;
};
std::string FormatReadiness(const Readiness& r);
// StoreProtocol naming the value when it is not in that form.
Result<Readiness> ParseReadiness(const std::string& value);

// True when ranks a and b talk over shared memory. Error when a forced choice
// cannot be honoured (shm between different hosts).
Result<bool> PairUsesShm(const PeerInfo& a, const PeerInfo& b);

// `store` is already scoped to this communicator. `listener` is the socket
// whose address this rank published in its PeerInfo.
Result<std::unique_ptr<Endpoint>> ConnectPeers(Store& store, int rank,
                                               const std::vector<PeerInfo>& peers, Fd listener,
                                               const ConnectOptions& options);

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_CONNECT_H_
