#include "base/socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include "base/fd.h"
#include "testing/ports.h"

namespace choir::net {
namespace {

// A socket bound to a port and connected to that same port completes by
// simultaneous open: the case a connect can fall into by chance when its
// target is an ephemeral port of this host that nobody listens on yet.
// Sets *port; an invalid Fd (with a gtest failure) when that did not happen.
Fd ConnectedToItself(int* port) {
  Fd fd = testing::RefusingPort(port);  // bound, not listening
  auto addr = Resolve("127.0.0.1", *port);
  if (!fd.valid() || !addr.ok()) return Fd();
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    ADD_FAILURE() << "connect to its own port 127.0.0.1:" << *port << ": errno " << errno;
    return Fd();
  }
  return fd;
}

TEST(SocketTest, SeesASocketConnectedToItself) {
  int port = 0;
  const Fd fd = ConnectedToItself(&port);
  ASSERT_TRUE(fd.valid());
  EXPECT_EQ(PeerAddress(fd.get()), LocalAddress(fd.get()));
  EXPECT_TRUE(IsConnectedToItself(fd.get()));
  // The port stays taken while the socket lives: a server could not start there.
  EXPECT_EQ(Listen("127.0.0.1", port).status().code(), Code::kAddressInUse);
}

// Connect's way out of a connection to itself frees the port at once, where
// an orderly close would leave it in TIME_WAIT.
TEST(SocketTest, AnAbortiveCloseOfASelfConnectionFreesThePort) {
  int port = 0;
  Fd fd = ConnectedToItself(&port);
  ASSERT_TRUE(fd.valid());
  CloseAbortively(fd);
  EXPECT_FALSE(fd.valid());
  auto server = Listen("127.0.0.1", port);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
}

TEST(SocketTest, AConnectionToAListenerIsNotToItself) {
  auto listener = Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  auto fd = Connect("127.0.0.1", LocalPort(listener->get()), Deadline::AfterSeconds(5));
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_FALSE(IsConnectedToItself(fd->get()));
  EXPECT_EQ(PeerAddress(fd->get()), "127.0.0.1:" + std::to_string(LocalPort(listener->get())));
  Fd unconnected(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_FALSE(IsConnectedToItself(unconnected.get()));
}

// Connect keeps trying a port nobody listens on until its deadline and then
// names it.
TEST(SocketTest, ConnectToAPortNobodyListensOnIsRefusedAtTheDeadline) {
  int port = 0;
  const Fd held = testing::RefusingPort(&port);
  ASSERT_GT(port, 0);
  const int64_t start = NowNanos();
  auto fd = Connect("127.0.0.1", port, Deadline::AfterSeconds(0.3));
  ASSERT_FALSE(fd.ok()) << "connected from " << LocalAddress(fd->get());
  EXPECT_GE(NowNanos() - start, 300'000'000);
  EXPECT_EQ(fd.status().code(), Code::kConnectRefused) << fd.status().ToString();
  EXPECT_NE(fd.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << fd.status().ToString();
}

}  // namespace
}  // namespace choir::net
