#include "transport/tcp/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "base/fd.h"
#include "base/socket.h"
#include "base/strings.h"

namespace choir::transport {

std::vector<Interface> ListInterfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, buf, sizeof(buf));
    out.push_back(Interface{it->ifa_name, buf, (it->ifa_flags & IFF_UP) != 0,
                            (it->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  return out;
}

bool MatchesIfname(const std::string& spec_in, const std::string& name) {
  std::string_view spec = strings::Trim(spec_in);
  bool exclude = false, exact = false;
  if (!spec.empty() && spec.front() == '^') {
    exclude = true;
    spec.remove_prefix(1);
  }
  if (!spec.empty() && spec.front() == '=') {
    exact = true;
    spec.remove_prefix(1);
  }
  bool listed = false;
  for (const std::string& raw : strings::Split(spec, ',')) {
    const std::string_view item = strings::Trim(raw);
    if (item.empty()) continue;
    if (exact ? name == item : strings::StartsWith(name, item)) listed = true;
  }
  return exclude ? !listed : listed;
}

Result<Interface> FindInterface(const std::string& spec, const std::vector<Interface>& all) {
  for (const Interface& i : all) {
    if (i.up && MatchesIfname(spec, i.name)) return i;
  }
  std::string have;
  for (const Interface& i : all) {
    have += (have.empty() ? "" : ", ") + i.name + "=" + i.address + (i.up ? "" : "(down)");
  }
  return Status(Code::kInterfaceNotFound, "CHOIR_SOCKET_IFNAME='" + spec +
                                              "' matches no interface that is up with an IPv4 "
                                              "address; this host has: " + (have.empty() ? "none" : have));
}

Result<std::string> SourceAddressFor(const std::string& host) {
  CHOIR_ASSIGN_OR_RETURN(sockaddr_in dst, net::Resolve(host, 9));
  Fd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError(Code::kSocketError, errno, "socket(udp)");
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    return ErrnoError(Code::kSocketError, errno, "no route to " + host);
  }
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len);
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
  return std::string(buf);
}

}  // namespace choir::transport
