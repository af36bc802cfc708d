#include "testing/ports.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <random>

#include "base/socket.h"

namespace choir::testing {

Fd RefusingPort(int* port) {
  *port = 0;
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (!fd.valid() || bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ADD_FAILURE() << "no port to hold on 127.0.0.1";
    return Fd();
  }
  *port = ntohs(a.sin_port);
  return fd;
}

int FreePortPair() {
  // Below the ephemeral range when there is room there, else above it; where
  // the range cannot be read, below the usual one (32768-60999).
  int ephemeral_low = 0, ephemeral_high = 0;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  const bool read = static_cast<bool>(range >> ephemeral_low >> ephemeral_high);
  int low = 10000, high = 32766;
  if (read && ephemeral_low > low + 100) {
    high = ephemeral_low - 2;
  } else if (read && ephemeral_high < 65000) {
    low = ephemeral_high + 1;
    high = 65533;
  } else if (read) {
    ADD_FAILURE() << "the ephemeral port range " << ephemeral_low << "-" << ephemeral_high
                  << " leaves no room for ports a test can count on";
    return 0;
  }
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = std::uniform_int_distribution<int>(low, high)(rng);
    auto first = net::Listen("127.0.0.1", port);
    if (!first.ok()) continue;
    auto second = net::Listen("127.0.0.1", port + 1);
    if (second.ok()) return port;
  }
  ADD_FAILURE() << "no free pair of ports on 127.0.0.1 in " << low << ".." << high;
  return 0;
}

}  // namespace choir::testing
