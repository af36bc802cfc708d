#include "testing/ports.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
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
  int ephemeral_low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> ephemeral_low;
  const int low = 10000;
  const int high = std::max(low + 100, ephemeral_low - 2);
  std::mt19937 rng(static_cast<unsigned>(getpid()) ^ static_cast<unsigned>(time(nullptr)));
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
