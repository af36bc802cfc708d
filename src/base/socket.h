// Thin, deadline-aware wrappers over BSD sockets (IPv4 TCP), shared by the TCP
// store and the TCP transport. Every blocking helper takes a Deadline and
// returns a Status naming the address and the system error.
//
// Thread-safety: functions are thread-safe; an fd must not be read (or
// written) by two threads at once.
#ifndef CHOIR_BASE_SOCKET_H_
#define CHOIR_BASE_SOCKET_H_

#include <netinet/in.h>

#include <cstddef>
#include <string>

#include "base/clock.h"
#include "base/fd.h"
#include "choir/status.h"

namespace choir::net {

// "10.0.0.2:4100".
std::string FormatAddress(const sockaddr_in& addr);
// Resolves a host name or dotted IPv4 address.
Result<sockaddr_in> Resolve(const std::string& host, int port);
// Splits "host:port"; InvalidArgument on a malformed string.
Status SplitHostPort(const std::string& text, std::string* host, int* port);

// A listening socket bound to host:port (port 0 = any). AddressInUse when taken.
Result<Fd> Listen(const std::string& host, int port, int backlog = 128);
// Port and address a socket is bound to / connected to.
int LocalPort(int fd);
std::string LocalAddress(int fd);
std::string PeerAddress(int fd);
// True when a TCP socket is connected to itself: a connect to a port of this
// host in the ephemeral range, while nothing listens there, can pick that very
// port as its source and complete by simultaneous open. Connect closes such a
// socket with CloseAbortively and retries, since it holds the port the awaited
// server needs.
bool IsConnectedToItself(int fd);
// Closes with a reset instead of the orderly close, so that the port is free
// at once (an orderly close would keep it in TIME_WAIT for a minute, where a
// listener cannot bind it).
void CloseAbortively(Fd& fd);

// Connects, retrying refused/unreachable attempts and connections to itself
// until `deadline` (the peer may not be listening yet). ConnectTimeout or
// ConnectRefused name the address.
Result<Fd> Connect(const std::string& host, int port, Deadline deadline);
// Accepts one connection; ConnectTimeout when the deadline passes first.
Result<Fd> Accept(int listen_fd, Deadline deadline);

Status SetNonBlocking(int fd, bool on);
Status SetNoDelay(int fd);
// Best effort: asks for large kernel buffers (may be capped by net.core.*mem_max).
void SetBufferSizes(int fd, int bytes);

// Blocking full transfers with a deadline (works on blocking and non-blocking fds).
// A closed connection gives PeerLost; an expired deadline `timeout_code`.
Status WriteFull(int fd, const void* data, size_t len, Deadline deadline,
                 Code timeout_code = Code::kConnectTimeout);
Status ReadFull(int fd, void* data, size_t len, Deadline deadline,
                Code timeout_code = Code::kConnectTimeout);

}  // namespace choir::net

#endif  // CHOIR_BASE_SOCKET_H_
