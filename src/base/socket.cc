#include "base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "base/strings.h"

namespace choir::net {

std::string FormatAddress(const sockaddr_in& addr) {
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf));
  return std::string(buf) + ":" + std::to_string(ntohs(addr.sin_port));
}

Result<sockaddr_in> Resolve(const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return InvalidArgument("port " + std::to_string(port) + " is outside 0..65535");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0" || host == "*") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    return addr;
  }
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    // A name server that does not answer may answer later; a name that does
    // not exist will not.
    const bool temporary = rc == EAI_AGAIN || rc == EAI_SYSTEM || rc == EAI_MEMORY;
    return Status(temporary ? Code::kSocketError : Code::kUnknownHost,
                  fmt::format("cannot resolve host '{}' to an IPv4 address: {}", host,
                              rc != 0 ? gai_strerror(rc) : "no address"));
  }
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return addr;
}

Status SplitHostPort(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("'" + text + "' is not host:port");
  }
  const auto p = strings::ParseInt(text.substr(colon + 1));
  if (!p || *p < 0 || *p > 65535) {
    return InvalidArgument("'" + text + "' has no valid port (0..65535)");
  }
  *host = text.substr(0, colon);
  *port = static_cast<int>(*p);
  return Status::Ok();
}

Result<Fd> Listen(const std::string& host, int port, int backlog) {
  CHOIR_ASSIGN_OR_RETURN(sockaddr_in addr, Resolve(host, port));
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError(Code::kSocketError, errno, "socket()");
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    return ErrnoError(err == EADDRINUSE ? Code::kAddressInUse : Code::kSocketError, err,
                      "bind(" + FormatAddress(addr) + ")");
  }
  if (listen(fd.get(), backlog) != 0) {
    return ErrnoError(Code::kSocketError, errno, "listen(" + FormatAddress(addr) + ")");
  }
  return fd;
}

int LocalPort(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  return ntohs(addr.sin_port);
}

std::string LocalAddress(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  return FormatAddress(addr);
}

std::string PeerAddress(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  return FormatAddress(addr);
}

bool IsConnectedToItself(int fd) {
  sockaddr_in local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  return local.sin_port == peer.sin_port && local.sin_addr.s_addr == peer.sin_addr.s_addr;
}

void CloseAbortively(Fd& fd) {
  if (!fd.valid()) return;
  const linger reset{.l_onoff = 1, .l_linger = 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  fd.Reset();
}

namespace {
// "the connection to 10.0.0.2:5000", or, once the kernel has forgotten the
// peer of a reset connection, the local end ("the connection from
// 10.0.0.1:41234"): callers add which peer that is.
std::string ConnectionName(int fd) {
  const std::string peer = PeerAddress(fd);
  if (peer != "?") return "the connection to " + peer;
  const std::string local = LocalAddress(fd);
  return local != "?" ? "the connection from " + local : "the connection";
}
}  // namespace

Result<Fd> Connect(const std::string& host, int port, Deadline deadline) {
  CHOIR_ASSIGN_OR_RETURN(sockaddr_in addr, Resolve(host, port));
  const std::string where = FormatAddress(addr);
  int last_err = 0;
  int backoff_ms = 1;
  while (true) {
    Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return ErrnoError(Code::kSocketError, errno, "socket()");
    int rc = connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      rc = poll(&p, 1, deadline.PollTimeoutMs(1000));
      if (rc == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else if (rc == 0) {
        rc = -1;
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0 && IsConnectedToItself(fd.get())) {
      // Nobody listens there yet: as good as refused. The port is freed for
      // the server at once.
      CloseAbortively(fd);
      rc = -1;
      errno = ECONNREFUSED;
    }
    if (rc == 0) {
      CHOIR_RETURN_IF_ERROR(SetNonBlocking(fd.get(), false));
      return fd;
    }
    last_err = errno;
    const bool retryable = last_err == ECONNREFUSED || last_err == ETIMEDOUT ||
                           last_err == ENETUNREACH || last_err == EHOSTUNREACH ||
                           last_err == ECONNRESET || last_err == EAGAIN || last_err == EINTR;
    if (!retryable) return ErrnoError(Code::kSocketError, last_err, "connect(" + where + ")");
    if (deadline.Expired()) break;
    const int64_t left_ms = deadline.RemainingNanos() / 1000000;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(backoff_ms, left_ms)));
    backoff_ms = std::min(backoff_ms * 2, 100);
  }
  if (last_err == ECONNREFUSED) {
    return Status(Code::kConnectRefused,
                  "connection to " + where + " refused until the deadline: nothing listens there");
  }
  return ErrnoError(Code::kConnectTimeout, last_err,
                    "connecting to " + where + " did not succeed before the deadline");
}

Result<Fd> Accept(int listen_fd, Deadline deadline) {
  while (true) {
    pollfd p{listen_fd, POLLIN, 0};
    const int rc = poll(&p, 1, deadline.PollTimeoutMs(1000));
    if (rc < 0 && errno != EINTR) return ErrnoError(Code::kSocketError, errno, "poll(accept)");
    if (rc > 0) {
      const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) return Fd(fd);
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        return ErrnoError(Code::kSocketError, errno, "accept()");
      }
    }
    if (deadline.Expired()) {
      return Status(Code::kConnectTimeout,
                    "no connection arrived at " + LocalAddress(listen_fd) + " before the deadline");
    }
  }
}

Status SetNonBlocking(int fd, bool on) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return ErrnoError(Code::kSocketError, errno, "fcntl(F_GETFL)");
  const int want = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (want != flags && fcntl(fd, F_SETFL, want) != 0) {
    return ErrnoError(Code::kSocketError, errno, "fcntl(F_SETFL)");
  }
  return Status::Ok();
}

Status SetNoDelay(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return ErrnoError(Code::kSocketError, errno, "setsockopt(TCP_NODELAY)");
  }
  return Status::Ok();
}

void SetBufferSizes(int fd, int bytes) {
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

Status WriteFull(int fd, const void* data, size_t len, Deadline deadline, Code timeout_code) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      const int rc = poll(&pf, 1, deadline.PollTimeoutMs(1000));
      if (rc == 0 && deadline.Expired()) {
        return Status(timeout_code, "sending on " + ConnectionName(fd) + " did not finish before the deadline");
      }
      continue;
    }
    const int err = errno;
    if (err == EPIPE || err == ECONNRESET) {
      return Status(Code::kPeerLost, ConnectionName(fd) + " was closed while sending");
    }
    return ErrnoError(Code::kSocketError, err, "send() on " + ConnectionName(fd));
  }
  return Status::Ok();
}

Status ReadFull(int fd, void* data, size_t len, Deadline deadline, Code timeout_code) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    const ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return Status(Code::kPeerLost, ConnectionName(fd) + " was closed by the other side");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pf{fd, POLLIN, 0};
      const int rc = poll(&pf, 1, deadline.PollTimeoutMs(1000));
      if (rc == 0 && deadline.Expired()) {
        return Status(timeout_code, "no answer on " + ConnectionName(fd) + " before the deadline");
      }
      continue;
    }
    const int err = errno;
    if (err == ECONNRESET) {
      return Status(Code::kPeerLost, ConnectionName(fd) + " was reset by the other side");
    }
    return ErrnoError(Code::kSocketError, err, "recv() on " + ConnectionName(fd));
  }
  return Status::Ok();
}

}  // namespace choir::net
