#include "transport/connect.h"

#include <gtest/gtest.h>

#include "choir/store.h"

namespace choir::transport {
namespace {

PeerInfo Peer(int rank, const std::string& host, const std::string& addr, const std::string& ns) {
  PeerInfo p;
  p.rank = rank;
  p.host_id = host;
  p.address = addr;
  p.net_ns = ns;
  return p;
}

TEST(ConnectTest, LoopbackAcrossNetworkNamespacesIsAClearError) {
  // Rank 0 on host a listens on 127.0.0.1; rank 1 is another host in another
  // network namespace and could never reach it.
  auto store = NewMemoryStore();
  std::vector<PeerInfo> peers = {Peer(0, "a", "127.0.0.1:5000", "boot/net:[1]"),
                                 Peer(1, "b", "10.0.0.2:5000", "boot/net:[2]")};
  ConnectOptions o;
  o.deadline = Deadline::AfterSeconds(2);
  auto ep = ConnectPeers(*store, 1, peers, Fd(), o);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), Code::kInterfaceNotFound);
  EXPECT_NE(ep.status().message().find("127.0.0.1"), std::string::npos);
  EXPECT_NE(ep.status().message().find("CHOIR_SOCKET_IFNAME"), std::string::npos);
}

TEST(ConnectTest, PairChoiceIsSymmetricAndForcedShmAcrossHostsFails) {
  PeerInfo a = Peer(0, "h1", "", ""), b = Peer(1, "h1", "", ""), c = Peer(2, "h2", "", "");
  EXPECT_TRUE(*PairUsesShm(a, b));
  EXPECT_FALSE(*PairUsesShm(a, c));
  b.choice = TransportChoice::kTcp;
  EXPECT_FALSE(*PairUsesShm(a, b));
  EXPECT_FALSE(*PairUsesShm(b, a));
  a.choice = TransportChoice::kShm;
  EXPECT_EQ(PairUsesShm(a, c).status().code(), Code::kInvalidSetting);
}

// What local ranks tell each other once mapped: round trip, and a value in
// another form (an older choir, a foreign writer) is a StoreProtocol error
// that names it and the expected form.
TEST(ReadinessTest, RoundTripAndMalformedValues) {
  const Readiness r{true, "amd", 524288};
  EXPECT_EQ(FormatReadiness(r), "cma=1 tuning=amd l2=524288");
  auto back = ParseReadiness(FormatReadiness(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->cma);
  EXPECT_EQ(back->tuning, "amd");
  EXPECT_EQ(back->cache_bytes, 524288u);
  auto off = ParseReadiness("cma=0 tuning=intel l2=0");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->cma);
  EXPECT_EQ(off->cache_bytes, 0u);
  for (const std::string bad : {"cma=1", "", "cma=1 tuning=amd", "cma=2 tuning=amd l2=5", "cma=1 tuning= l2=5",
                                "cma=1 tuning=amd l2=-1", "cma=1 tuning=amd l2=big"}) {
    auto p = ParseReadiness(bad);
    ASSERT_FALSE(p.ok()) << "'" << bad << "'";
    EXPECT_EQ(p.status().code(), Code::kStoreProtocol) << bad;
    EXPECT_NE(p.status().message().find("'" + bad + "'"), std::string::npos) << p.status().ToString();
    EXPECT_NE(p.status().message().find("tuning=NAME"), std::string::npos) << p.status().ToString();
  }
}

}  // namespace
}  // namespace choir::transport

namespace choir::transport {
namespace {

TEST(WaitPolicyTest, RanksCompeteForCpusCountsEachRanksShare) {
  // Two free ranks on two CPUs, or bound one per CPU: no competition.
  EXPECT_FALSE(RanksCompeteForCpus({{0, 1}, {0, 1}}, 2));
  EXPECT_FALSE(RanksCompeteForCpus({{0}, {1}}, 2));
  EXPECT_FALSE(RanksCompeteForCpus({{0, 1}, {2, 3}, {4, 5}, {6, 7}}, 8));
  // Three free ranks on two CPUs, two ranks stacked on one CPU, or a bound
  // and a free rank on the bound one's CPU.
  EXPECT_TRUE(RanksCompeteForCpus({{0, 1}, {0, 1}, {0, 1}}, 2));
  EXPECT_TRUE(RanksCompeteForCpus({{0}, {0}}, 8));
  EXPECT_TRUE(RanksCompeteForCpus({{0}, {1}, {0, 1}}, 2));
  // A rank's affinity unknown: ranks against online CPUs.
  EXPECT_FALSE(RanksCompeteForCpus({{0}, {}}, 2));
  EXPECT_TRUE(RanksCompeteForCpus({{0}, {}, {1}}, 2));
}

// Counted with their progress threads (threads_per_rank = 2): whether each
// rank's progress thread finds a CPU of its own (comm/bootstrap.cc).
TEST(WaitPolicyTest, ProgressThreadsCountAsASecondThreadPerRank) {
  // Two free ranks on two CPUs (torchrun on a small host), or bound one per
  // CPU: the progress threads have no CPU of their own.
  EXPECT_TRUE(RanksCompeteForCpus({{0, 1}, {0, 1}}, 2, 2));
  EXPECT_TRUE(RanksCompeteForCpus({{0}, {1}}, 2, 2));
  // Two CPUs per rank, free or bound: they do.
  EXPECT_FALSE(RanksCompeteForCpus({{0, 1, 2, 3}, {0, 1, 2, 3}}, 4, 2));
  EXPECT_FALSE(RanksCompeteForCpus({{0, 1}, {2, 3}}, 4, 2));
  // Eight free ranks on 64 CPUs do, and eight confined to 16 of them; a
  // ninth on those 16 tips the balance.
  std::vector<int> all64(64);
  for (int i = 0; i < 64; ++i) all64[static_cast<size_t>(i)] = i;
  EXPECT_FALSE(RanksCompeteForCpus(std::vector<std::vector<int>>(8, all64), 64, 2));
  const std::vector<int> first16(all64.begin(), all64.begin() + 16);
  EXPECT_FALSE(RanksCompeteForCpus(std::vector<std::vector<int>>(8, first16), 64, 2));
  EXPECT_TRUE(RanksCompeteForCpus(std::vector<std::vector<int>>(9, first16), 64, 2));
  // A rank's affinity unknown: twice the ranks against online CPUs.
  EXPECT_FALSE(RanksCompeteForCpus({{0}, {}}, 4, 2));
  EXPECT_TRUE(RanksCompeteForCpus({{0}, {}}, 3, 2));
}

}  // namespace
}  // namespace choir::transport
