#include "transport/shm/shared_buffers.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include "choir/shared_buffer.h"

namespace choir::transport {
namespace {

TEST(SharedBufferTest, AllocateGivesZeroedMemoryThatTheRegistryFinds) {
  auto b = SharedBuffer::Allocate(10000);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->size(), 10000u);
  const auto* p = b->as<uint8_t>();
  for (size_t i = 0; i < b->size(); ++i) ASSERT_EQ(p[i], 0) << i;
  const SharedRef whole = FindShared(p, 10000);
  EXPECT_NE(whole.id, 0u);
  EXPECT_EQ(whole.base, reinterpret_cast<uint64_t>(p));
  EXPECT_EQ(whole.bytes % 4096, 0u);  // whole pages
  EXPECT_GE(whole.bytes, 10000u);
  EXPECT_GE(whole.fd, 0);
  const SharedRef inner = FindShared(p + 4000, 100);
  EXPECT_EQ(inner.id, whole.id);
  EXPECT_EQ(inner.base, whole.base);
  // Ranges that leave the buffer, and ordinary memory, are not shared.
  EXPECT_EQ(FindShared(p + whole.bytes - 8, 16).id, 0u);
  std::vector<uint8_t> heap(64);
  EXPECT_EQ(FindShared(heap.data(), heap.size()).id, 0u);
  EXPECT_EQ(FindShared(nullptr, 0).id, 0u);
}

TEST(SharedBufferTest, EveryBufferHasItsOwnIdAndIsForgottenWhenDestroyed) {
  auto a = SharedBuffer::Allocate(4096);
  auto b = SharedBuffer::Allocate(4096);
  ASSERT_TRUE(a.ok() && b.ok());
  const SharedRef ra = FindShared(a->data(), 1);
  const SharedRef rb = FindShared(b->data(), 1);
  EXPECT_NE(ra.id, rb.id);
  void* gone = b->data();
  { SharedBuffer drop = std::move(*b); }
  EXPECT_EQ(b->data(), nullptr);  // moved from
  EXPECT_NE(FindShared(gone, 1).id, rb.id);
  // Move assignment releases what the target held.
  void* old = a->data();
  auto c = SharedBuffer::Allocate(8192);
  ASSERT_TRUE(c.ok());
  *a = std::move(*c);
  EXPECT_NE(a->data(), old);
  EXPECT_EQ(FindShared(a->data(), 8192).bytes, 8192u);
}

TEST(SharedBufferTest, ZeroBytesIsAnInvalidArgument) {
  auto b = SharedBuffer::Allocate(0);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kInvalidArgument);
  auto huge = SharedBuffer::Allocate((size_t{1} << 46) + 1);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), Code::kInvalidArgument);
}

TEST(SharedBufferTest, MoreThanTheHostHasFreeIsOutOfMemoryNotTheOomKiller) {
  // 64 TiB is within the size limit and beyond any host's free memory.
  auto b = SharedBuffer::Allocate(size_t{1} << 46);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kOutOfMemory);
  const std::string& message = b.status().message();
  EXPECT_EQ(message.rfind("a shared buffer of 64 TiB does not fit the ", 0), 0u) << message;
  EXPECT_NE(message.find("of memory this host has available (MemAvailable)"), std::string::npos)
      << message;
}

// A child process owns shared buffers filled with a pattern and sends their
// references through a pipe; the parent maps them like a peer rank would.
class PeerProcess {
 public:
  explicit PeerProcess(int buffers) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      std::vector<SharedBuffer> keep;
      for (int i = 0; i < buffers; ++i) {
        auto b = SharedBuffer::Allocate(8192);
        if (!b.ok()) _exit(1);
        std::memset(b->data(), 'a' + i % 26, 8192);
        const SharedRef r = FindShared(b->data(), 8192);
        if (write(fds[1], &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) _exit(1);
        keep.push_back(std::move(*b));
      }
      close(fds[1]);
      pause();  // until the parent kills it
      _exit(0);
    }
    close(fds[1]);
    for (int i = 0; i < buffers; ++i) {
      SharedRef r;
      if (read(fds[0], &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) break;
      refs_.push_back(r);
    }
    close(fds[0]);
  }
  ~PeerProcess() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  int pid() const { return pid_; }
  const std::vector<SharedRef>& refs() const { return refs_; }

 private:
  int pid_ = -1;
  std::vector<SharedRef> refs_;
};

TEST(PeerBufferMapsTest, MapsAnotherProcesssBufferOnceAndSeesItsWrites) {
  PeerProcess peer(2);
  ASSERT_EQ(peer.refs().size(), 2u);
  PeerBufferMaps maps;
  auto p = maps.Map(peer.pid(), 1, peer.refs()[1]);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)[0], 'b');
  EXPECT_EQ((*p)[8191], 'b');
  auto again = maps.Map(peer.pid(), 1, peer.refs()[1]);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *p);  // cached
  EXPECT_EQ(maps.mapped(), 1u);
  // The mapping is the owner's memory: a write through it shows in a second,
  // independent mapping of the same buffer, and not in its other buffer.
  (*p)[5] = 'Z';
  PeerBufferMaps second;
  auto same = second.Map(peer.pid(), 1, peer.refs()[1]);
  ASSERT_TRUE(same.ok());
  EXPECT_NE(*same, *p);
  EXPECT_EQ((*same)[5], 'Z');
  auto other = maps.Map(peer.pid(), 1, peer.refs()[0]);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)[5], 'a');
  EXPECT_EQ(maps.mapped(), 2u);
}

TEST(PeerBufferMapsTest, KeepsAtMostTheLimitOutsideOneOperation) {
  const int n = static_cast<int>(PeerBufferMaps::kMaxMappings) + 6;
  PeerProcess peer(n);
  ASSERT_EQ(peer.refs().size(), static_cast<size_t>(n));
  PeerBufferMaps maps;
  for (int i = 0; i < n; ++i) {
    maps.NewOperation();
    auto p = maps.Map(peer.pid(), 3, peer.refs()[static_cast<size_t>(i)]);
    ASSERT_TRUE(p.ok()) << i << ": " << p.status().ToString();
    EXPECT_EQ((*p)[100], 'a' + i % 26) << i;
  }
  EXPECT_EQ(maps.mapped(), PeerBufferMaps::kMaxMappings);
  // Within one operation nothing it uses is dropped, even past the limit.
  maps.NewOperation();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(maps.Map(peer.pid(), 3, peer.refs()[static_cast<size_t>(i)]).ok());
  EXPECT_EQ(maps.mapped(), static_cast<size_t>(n));
}

TEST(PeerBufferMapsTest, ABufferThatCannotBeMappedIsAShmErrorNamingTheRank) {
  PeerProcess peer(1);
  ASSERT_EQ(peer.refs().size(), 1u);
  SharedRef bad = peer.refs()[0];
  bad.fd = 100000;  // no such descriptor in the peer
  PeerBufferMaps maps;
  auto p = maps.Map(peer.pid(), 5, bad);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kShmError);
  EXPECT_NE(p.status().message().find("rank 5"), std::string::npos) << p.status().ToString();
  EXPECT_NE(p.status().message().find("pidfd_getfd"), std::string::npos) << p.status().ToString();
}

TEST(PeerBufferMapsTest, ADescriptorThatIsNowAnotherFileIsRefused) {
  // The owner's descriptor number now names another buffer (as after the
  // first was destroyed and the number reused): its inode gives it away.
  PeerProcess peer(2);
  ASSERT_EQ(peer.refs().size(), 2u);
  SharedRef stale = peer.refs()[0];
  stale.fd = peer.refs()[1].fd;
  PeerBufferMaps maps;
  auto p = maps.Map(peer.pid(), 2, stale);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kShmError);
  EXPECT_NE(p.status().message().find("no longer the buffer it published"), std::string::npos)
      << p.status().ToString();
}

TEST(PeerBufferMapsTest, APeerThatIsGoneIsLeftToTheKernelCopy) {
  // No mapping and no error: the caller's process_vm_readv reports PeerLost.
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  auto b = SharedBuffer::Allocate(4096);
  ASSERT_TRUE(b.ok());
  PeerBufferMaps maps;
  auto p = maps.Map(pid, 1, FindShared(b->data(), 1));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, nullptr);
}

TEST(PeerBufferMapsTest, ARankOfThisProcessGetsItsOwnMappingThatOutlivesTheBuffer) {
  // Threads as ranks: the peer's view must stay valid even if the owner
  // frees the buffer (as after an abort) while the peer still copies.
  auto b = SharedBuffer::Allocate(4096);
  ASSERT_TRUE(b.ok());
  b->as<uint8_t>()[10] = 42;
  PeerBufferMaps maps;
  auto p = maps.Map(getpid(), 0, FindShared(b->data(), 1));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_NE(*p, b->data());
  EXPECT_EQ((*p)[10], 42);
  EXPECT_EQ(maps.mapped(), 1u);
  { SharedBuffer gone = std::move(*b); }
  (*p)[11] = 7;  // still mapped here
  EXPECT_EQ((*p)[10], 42);
}

}  // namespace
}  // namespace choir::transport
