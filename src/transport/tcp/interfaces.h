// Choosing the address this rank listens on for TCP links.
//
// CHOIR_SOCKET_IFNAME follows NCCL's syntax: a comma-separated list of
// interface-name prefixes ("eth,ib"), "^" in front excludes them ("^docker,lo"),
// "=" in front asks for exact names ("=eth0"). Without it, choir picks the
// interface the kernel would use to reach the rendezvous host, which is
// what every rank of a job can reach.
//
// Thread-safety: pure functions over a snapshot of the interfaces.
#ifndef CHOIR_TRANSPORT_TCP_INTERFACES_H_
#define CHOIR_TRANSPORT_TCP_INTERFACES_H_

#include <string>
#include <vector>

#include "choir/status.h"

namespace choir::transport {

struct Interface {
  std::string name;     // "eth0"
  std::string address;  // "10.0.0.2"
  bool up = false;
  bool loopback = false;
};

std::vector<Interface> ListInterfaces();
// True when `name` is selected by the CHOIR_SOCKET_IFNAME-style `spec`.
bool MatchesIfname(const std::string& spec, const std::string& name);
// The first up interface matching `spec` (InterfaceNotFound lists what exists).
Result<Interface> FindInterface(const std::string& spec, const std::vector<Interface>& all);
// The local address the kernel routes to `host` from (no packet is sent).
Result<std::string> SourceAddressFor(const std::string& host);

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_TCP_INTERFACES_H_
