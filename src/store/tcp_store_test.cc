// TCP store specifics: handshake refusals, server failures, hostile clients,
// unresponsive servers, and parked Waits.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/fd.h"
#include "base/socket.h"
#include "choir/store.h"
#include "choir/version.h"
#include "store/store_test_util.h"
#include "store/tcp_store_wire.h"
#include "testing/ports.h"

namespace choir {
namespace {

namespace wire = store::wire;
using std::chrono::milliseconds;
using store::testing::Stopwatch;

std::unique_ptr<TcpStoreServer> StartServer(const std::string& job = "job") {
  auto server = TcpStoreServer::Start({.host = "127.0.0.1", .port = 0, .job_id = job});
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(server).value() : nullptr;
}

Result<std::shared_ptr<Store>> Connect(int port, const std::string& job = "job",
                                       milliseconds timeout = milliseconds(2000), int rank = 0) {
  return ConnectTcpStore(
      {.host = "127.0.0.1", .port = port, .job_id = job, .rank = rank, .timeout = timeout});
}

Fd RawConnect(int port) {
  auto fd = net::Connect("127.0.0.1", port, Deadline::AfterSeconds(2));
  EXPECT_TRUE(fd.ok()) << fd.status().ToString();
  return fd.ok() ? std::move(fd).value() : Fd();
}

Status Send(int fd, const std::string& bytes) {
  return net::WriteFull(fd, bytes.data(), bytes.size(), Deadline::AfterSeconds(2));
}

std::string HelloFrame(const std::string& job, uint32_t version = kProtocolVersion) {
  std::string frame;
  wire::EncodeHello(wire::Hello{.version = version, .job_id = job, .rank = 9}, &frame);
  return frame;
}

std::string RequestFrame(const wire::Request& request) {
  std::string frame;
  wire::EncodeRequest(request, &frame);
  return frame;
}

// Reads one frame body (tests only talk to well-behaved peers this way).
Result<std::string> ReadBody(int fd, double seconds = 2) {
  const Deadline deadline = Deadline::AfterSeconds(seconds);
  char header[4];
  CHOIR_RETURN_IF_ERROR(net::ReadFull(fd, header, 4, deadline));
  CHOIR_ASSIGN_OR_RETURN(const size_t len, wire::DecodeFrameHeader(std::string_view(header, 4)));
  std::string body(len, '\0');
  CHOIR_RETURN_IF_ERROR(net::ReadFull(fd, body.data(), len, deadline));
  return body;
}

Result<wire::HelloReply> ReadHelloReply(int fd) {
  CHOIR_ASSIGN_OR_RETURN(const std::string body, ReadBody(fd));
  wire::HelloReply reply;
  CHOIR_RETURN_IF_ERROR(wire::DecodeHelloReply(body, &reply));
  return reply;
}

// True when the peer closes the connection (EOF or reset) before the deadline;
// whatever it sends first is discarded.
bool ClosedByPeer(int fd, milliseconds within = milliseconds(2000)) {
  const Deadline deadline = Deadline::AfterSeconds(within.count() / 1000.0);
  char buf[4096];
  while (!deadline.Expired()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, deadline.PollTimeoutMs(100)) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

void ExpectNumClients(const TcpStoreServer& server, int want) {
  const Deadline deadline = Deadline::AfterSeconds(2);
  while (server.num_clients() != want && !deadline.Expired()) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  EXPECT_EQ(server.num_clients(), want);
}

// A listening socket on 127.0.0.1 whose single connection is handled by
// `behavior` on a thread. Destroy clients before the FakeServer: behaviors
// end when their client closes.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(int)> behavior) {
    auto fd = net::Listen("127.0.0.1", 0);
    EXPECT_TRUE(fd.ok());
    if (!fd.ok()) return;
    listen_ = std::move(fd).value();
    port_ = net::LocalPort(listen_.get());
    thread_ = std::thread([this, behavior] {
      auto conn = net::Accept(listen_.get(), Deadline::AfterSeconds(5));
      if (conn.ok()) behavior(conn->get());
    });
  }
  ~FakeServer() {
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }

 private:
  Fd listen_;
  int port_ = 0;
  std::thread thread_;
};

// Reads the Hello, sends `reply` (if not empty), then idles until the client leaves.
std::function<void(int)> AnswerHelloWith(std::string reply) {
  return [reply](int fd) {
    if (!ReadBody(fd).ok()) return;
    if (!reply.empty() && !Send(fd, reply).ok()) return;
    ClosedByPeer(fd, milliseconds(5000));
  };
}

std::string AcceptReply(uint32_t server_version = kProtocolVersion) {
  std::string frame;
  wire::EncodeHelloReply(wire::HelloReply{.server_version = server_version}, &frame);
  return frame;
}

TEST(TcpStoreTest, ClientOfAnotherJobIsRefusedWithJobMismatch) {
  auto server = StartServer("job-a");
  ASSERT_NE(server, nullptr);
  auto store = Connect(server->port(), "job-b");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kJobMismatch);
  EXPECT_NE(store.status().message().find("job-a"), std::string::npos);
  EXPECT_NE(store.status().message().find("job-b"), std::string::npos);
  ExpectNumClients(*server, 0);
  EXPECT_TRUE(Connect(server->port(), "job-a").ok());
}

TEST(TcpStoreTest, ServerRefusesAnotherProtocolVersion) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  Fd fd = RawConnect(server->port());
  ASSERT_TRUE(Send(fd.get(), HelloFrame("job", kProtocolVersion + 1)).ok());
  auto reply = ReadHelloReply(fd.get());
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->code, static_cast<int>(Code::kVersionMismatch));
  EXPECT_TRUE(ClosedByPeer(fd.get()));
  EXPECT_EQ(server->num_clients(), 0);
}

TEST(TcpStoreTest, ClientSurfacesVersionMismatch) {
  {
    FakeServer fake(AnswerHelloWith(AcceptReply(kProtocolVersion + 1)));
    auto store = Connect(fake.port());
    EXPECT_EQ(store.status().code(), Code::kVersionMismatch) << store.status().ToString();
  }
  {
    std::string refusal;
    wire::EncodeHelloReply({.code = static_cast<int>(Code::kVersionMismatch), .message = "too new"},
                           &refusal);
    FakeServer fake(AnswerHelloWith(refusal));
    auto store = Connect(fake.port());
    EXPECT_EQ(store.status().code(), Code::kVersionMismatch) << store.status().ToString();
    EXPECT_NE(store.status().message().find("too new"), std::string::npos);
  }
}

TEST(TcpStoreTest, AnotherServiceOnThePortIsStoreProtocol) {
  FakeServer fake(AnswerHelloWith("HTTP/1.1 400 Bad Request\r\n\r\n"));
  auto store = Connect(fake.port());
  EXPECT_EQ(store.status().code(), Code::kStoreProtocol) << store.status().ToString();
}

TEST(TcpStoreTest, PortAlreadyInUseIsAddressInUse) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto second = TcpStoreServer::Start({.host = "127.0.0.1", .port = server->port()});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kAddressInUse);
  EXPECT_NE(second.status().message().find(std::to_string(server->port())), std::string::npos);
}

TEST(TcpStoreTest, NothingListeningIsStoreUnreachableNamingTheAddress) {
  int port = 0;
  const Fd held = testing::RefusingPort(&port);
  ASSERT_GT(port, 0);
  Stopwatch watch;
  auto store = Connect(port, "job", milliseconds(200));
  EXPECT_LT(watch.Elapsed(), milliseconds(1500));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kStoreUnreachable);
  EXPECT_NE(store.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << store.status().message();
}

TEST(TcpStoreTest, ClientRetriesUntilTheServerStarts) {
  int port = 0;
  {
    auto fd = net::Listen("127.0.0.1", 0);
    ASSERT_TRUE(fd.ok());
    port = net::LocalPort(fd->get());
  }
  Result<std::shared_ptr<Store>> store = Status(Code::kInternal, "not run");
  std::thread client([&] { store = Connect(port, "job", milliseconds(3000)); });
  std::this_thread::sleep_for(milliseconds(150));
  auto server = TcpStoreServer::Start({.host = "127.0.0.1", .port = port, .job_id = "job"});
  client.join();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->Set("k", "v").ok());
}

TEST(TcpStoreTest, ServerThatNeverAnswersTheHandshakeGivesConnectTimeout) {
  // Listening but never accepting: the kernel completes the TCP handshake,
  // nobody reads the Hello.
  auto listen_fd = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listen_fd.ok());
  Stopwatch watch;
  auto store = Connect(net::LocalPort(listen_fd->get()), "job", milliseconds(300));
  EXPECT_LT(watch.Elapsed(), milliseconds(1500));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kConnectTimeout) << store.status().ToString();
}

TEST(TcpStoreTest, ServerThatStopsAnsweringGivesStoreTimeout) {
  FakeServer fake(AnswerHelloWith(AcceptReply()));
  {
    auto store = Connect(fake.port(), "job", milliseconds(300));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    Stopwatch watch;
    const auto value = (*store)->Get("k");
    EXPECT_EQ(value.status().code(), Code::kStoreTimeout) << value.status().ToString();
    EXPECT_GE(watch.Elapsed(), milliseconds(250));
    EXPECT_LT(watch.Elapsed(), milliseconds(1500));
    // The connection is unusable now and says so at once.
    Stopwatch again;
    EXPECT_EQ((*store)->Set("k", "v").code(), Code::kStoreUnreachable);
    EXPECT_LT(again.Elapsed(), milliseconds(100));
  }
}

TEST(TcpStoreTest, UnansweredWaitTimesOutShortlyAfterItsTimeout) {
  FakeServer fake(AnswerHelloWith(AcceptReply()));
  {
    auto store = Connect(fake.port(), "job", milliseconds(5000));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    Stopwatch watch;
    const Status status = (*store)->Wait({"k"}, milliseconds(100));
    EXPECT_EQ(status.code(), Code::kStoreTimeout) << status.ToString();
    EXPECT_LT(watch.Elapsed(), milliseconds(1500));
  }
}

TEST(TcpStoreTest, StoppedServerGivesErrorsNotHangs) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto store = Connect(server->port());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  server->Stop();
  Stopwatch watch;
  const auto value = (*store)->Get("k");
  ASSERT_FALSE(value.ok());
  EXPECT_TRUE(value.status().code() == Code::kPeerLost ||
              value.status().code() == Code::kStoreUnreachable)
      << value.status().ToString();
  EXPECT_NE(value.status().message().find("127.0.0.1:" + std::to_string(server->port())),
            std::string::npos)
      << value.status().message();
  EXPECT_EQ(value.status().message().find('?'), std::string::npos) << value.status().message();
  EXPECT_EQ((*store)->Add("n", 1).status().code(), Code::kStoreUnreachable);
  EXPECT_LT(watch.Elapsed(), milliseconds(1000));
  server->Stop();  // idempotent
}

TEST(TcpStoreTest, StoppingTheServerWakesABlockedWait) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto store = Connect(server->port());
  ASSERT_TRUE(store.ok());
  Status status;
  Stopwatch watch;
  std::thread waiter([&] { status = (*store)->Wait({"never"}, milliseconds(10000)); });
  std::this_thread::sleep_for(milliseconds(100));
  server.reset();  // the destructor stops the server
  waiter.join();
  EXPECT_EQ(status.code(), Code::kPeerLost) << status.ToString();
  // Named by the store's address, not by a "?" for a peer the kernel forgot.
  EXPECT_NE(status.message().find("choir store at 127.0.0.1:"), std::string::npos) << status.message();
  EXPECT_EQ(status.message().find('?'), std::string::npos) << status.message();
  EXPECT_LT(watch.Elapsed(), milliseconds(1500));
}

TEST(TcpStoreTest, ParkedWaitsOfManyClientsWakeOnOneSet) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  constexpr int kClients = 6;
  std::vector<std::shared_ptr<Store>> stores;
  for (int i = 0; i < kClients; ++i) {
    auto store = Connect(server->port(), "job", milliseconds(2000), i);
    ASSERT_TRUE(store.ok());
    stores.push_back(*store);
  }
  ExpectNumClients(*server, kClients);
  std::vector<Status> results(kClients);
  std::vector<std::thread> waiters;
  for (int i = 1; i < kClients; ++i) {
    waiters.emplace_back([&, i] {
      results[i] = stores[i]->Wait({"go", "also"}, milliseconds(3000));
    });
  }
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(stores[0]->Set("go", "1").ok());
  // Deleting a key that was already seen must not count as present later.
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(stores[0]->Delete("go").value());
  ASSERT_TRUE(stores[0]->Set("also", "1").ok());
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(stores[0]->Set("go", "2").ok());
  for (auto& waiter : waiters) waiter.join();
  for (int i = 1; i < kClients; ++i) EXPECT_TRUE(results[i].ok()) << results[i].ToString();
}

TEST(TcpStoreTest, LargeValuesCrossTheWireIntact) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto store = Connect(server->port());
  ASSERT_TRUE(store.ok());
  std::string big(16 << 20, '\0');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i >> 12);
  ASSERT_TRUE((*store)->Set("big", big).ok());
  const auto value = (*store)->Get("big");
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE(*value == big);
}

TEST(TcpStoreTest, ClientLeavingWhileParkedIsForgotten) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto good = Connect(server->port());
  ASSERT_TRUE(good.ok());
  {
    Fd fd = RawConnect(server->port());
    ASSERT_TRUE(Send(fd.get(), HelloFrame("job")).ok());
    ASSERT_TRUE(ReadHelloReply(fd.get()).ok());
    ASSERT_TRUE(
        Send(fd.get(),
             RequestFrame({.type = wire::MsgType::kWait, .number = 10000, .keys = {"later"}}))
            .ok());
    ExpectNumClients(*server, 2);
  }
  ExpectNumClients(*server, 1);
  EXPECT_TRUE((*good)->Set("later", "x").ok());
  EXPECT_EQ((*good)->Get("later").value(), "x");
}

// Each hostile connection is dropped; the well-behaved client never notices.
TEST(TcpStoreTest, MalformedInputDropsOnlyThatClient) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto good = Connect(server->port());
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE((*good)->Set("alive", "yes").ok());

  std::mt19937 rng(4242);
  std::string random_bytes(1000, '\0');
  for (char& c : random_bytes) c = static_cast<char>(rng());
  random_bytes[3] = '\x40';  // the first "length" is certainly over the limit
  const std::string hello = HelloFrame("job");
  std::string bad_type = std::string("\x01\0\0\0\x7f", 5);
  std::string huge_keys_count = std::string("\x09\0\0\0", 4) +
                                static_cast<char>(wire::MsgType::kCheck) + "\xff\xff\xff\xff" +
                                "abcd";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"random bytes", random_bytes},
      {"huge length prefix", "\xff\xff\xff\xff" + std::string(100, 'x')},
      {"zero length prefix", std::string(8, '\0')},
      {"request before hello", RequestFrame({.type = wire::MsgType::kGet, .key = "alive"})},
      {"hello with bad magic", std::string("\x0d\0\0\0\x01XXXX", 9) + std::string(8, '\0')},
      {"unknown request type", hello + bad_type},
      {"impossible key count", hello + huge_keys_count},
      {"second hello", hello + hello},
  };
  for (const auto& [name, bytes] : cases) {
    Fd fd = RawConnect(server->port());
    ASSERT_TRUE(fd.valid());
    Send(fd.get(), bytes).IgnoreError();  // the server may hang up mid-way
    EXPECT_TRUE(ClosedByPeer(fd.get())) << name;
    EXPECT_EQ((*good)->Get("alive").value(), "yes") << name;
  }

  // A frame that announces 60 MiB, sends a little and hangs up.
  {
    Fd fd = RawConnect(server->port());
    ASSERT_TRUE(Send(fd.get(), hello + std::string("\x00\x00\xc0\x03", 4) + "\x10partial").ok());
  }
  // Mutated valid requests after a valid hello.
  for (int iter = 0; iter < 50; ++iter) {
    std::string frame = RequestFrame({.type = wire::MsgType::kCompareSet,
                                      .key = "fuzz",
                                      .value = "desired",
                                      .expected = "expected"});
    for (int f = 0; f < 2; ++f) frame[4 + rng() % (frame.size() - 4)] = static_cast<char>(rng());
    Fd fd = RawConnect(server->port());
    Send(fd.get(), hello + frame).IgnoreError();
  }
  EXPECT_EQ((*good)->Get("alive").value(), "yes");
  ExpectNumClients(*server, 1);
}

TEST(TcpStoreTest, ClientFloodingAheadOfItsAnswersIsDropped) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  Fd fd = RawConnect(server->port());
  ASSERT_TRUE(Send(fd.get(), HelloFrame("job")).ok());
  ASSERT_TRUE(ReadHelloReply(fd.get()).ok());
  // A parked Wait, then far more than one frame of further bytes.
  std::string flood = RequestFrame({.type = wire::MsgType::kWait, .number = 10000, .keys = {"x"}});
  flood += std::string(wire::kMaxFrameBodyBytes + (2 << 20), 'z');
  const Status sent =
      net::WriteFull(fd.get(), flood.data(), flood.size(), Deadline::AfterSeconds(5));
  EXPECT_TRUE(sent.ok() || sent.code() == Code::kPeerLost) << sent.ToString();
  EXPECT_TRUE(ClosedByPeer(fd.get()));
  ExpectNumClients(*server, 0);
}

}  // namespace
}  // namespace choir
