// ReadRemote / WriteRemote (process_vm_readv / writev) between addresses a
// string copy handles slowly (kernels::CopyAliased) go through a bounce
// buffer; these check the bytes that arrive, on this process's own memory.
#include "algorithms/local_ops.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/reduce.h"

namespace choir::algorithms {
namespace {

class RemoteCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The same probe connect.cc makes: where process_vm_readv is refused
    // (seccomp, ptrace rules) choir never calls these, and neither can this.
    uint64_t value = 42;
    uint64_t copy = 0;
    iovec local{&copy, sizeof(copy)};
    iovec remote{&value, sizeof(value)};
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof(copy))) {
      GTEST_SKIP() << "process_vm_readv is refused here (" << std::strerror(errno)
                   << "): choir takes its ring paths instead, and this test cannot run";
    }
  }
  // src at `src_offset` in a page, dst `distance` bytes further modulo 4 KiB,
  // guard bytes around dst.
  void Check(bool write, size_t bytes, size_t src_offset, size_t distance) {
    SCOPED_TRACE(std::string(write ? "write" : "read") + " bytes " + std::to_string(bytes) + " src_offset " +
                 std::to_string(src_offset) + " distance " + std::to_string(distance));
    const size_t span = (bytes + 2 * 4096) / 4096 * 4096;
    std::vector<uint8_t> arena(2 * span + 2 * 4096);
    const auto base = (reinterpret_cast<uintptr_t>(arena.data()) + 4095) & ~uintptr_t{4095};
    auto* src = reinterpret_cast<uint8_t*>(base + src_offset);
    auto* dst = reinterpret_cast<uint8_t*>(base + span + src_offset + distance);
    ASSERT_LE(dst + bytes + 1, arena.data() + arena.size());
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(rng_());
    dst[-1] = 0xa5;
    dst[bytes] = 0x5a;
    const Status s = write ? WriteRemote(getpid(), 0, reinterpret_cast<uint64_t>(dst), src, bytes)
                           : ReadRemote(getpid(), 0, dst, reinterpret_cast<uint64_t>(src), bytes);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(std::memcmp(dst, src, bytes), 0);
    EXPECT_EQ(dst[-1], 0xa5);
    EXPECT_EQ(dst[bytes], 0x5a);
  }
  std::mt19937_64 rng_{3};
};

TEST_F(RemoteCopyTest, AliasedAndPlainDistancesArriveExactly) {
  // Below the bounce threshold, at it, one piece with a tail, several pieces.
  for (size_t bytes : {size_t{4095}, size_t{4096}, size_t{70001}, size_t{128 * 1024}, size_t{300007}}) {
    for (size_t distance : {0, 1, 16, 63, 64, 2048}) {
      for (bool write : {false, true}) {
        Check(write, bytes, /*src_offset=*/48, distance);
        Check(write, bytes, /*src_offset=*/4000, distance);
      }
    }
  }
}

TEST(RemoteCopyBouncesTest, TheKernelsDestinationAfterItsSource) {
  alignas(4096) static uint8_t page[2 * 4096];
  const auto at = [&](size_t offset) { return reinterpret_cast<uint64_t>(page + offset); };
  // A read copies remote -> local: bounces when local lies 1-63 bytes after remote.
  EXPECT_TRUE(RemoteCopyBounces(/*write=*/false, page + 16, at(0), kRemoteBounceMinBytes));
  EXPECT_FALSE(RemoteCopyBounces(/*write=*/false, page, at(16), kRemoteBounceMinBytes));
  // A write copies local -> remote: bounces when remote lies after local.
  EXPECT_TRUE(RemoteCopyBounces(/*write=*/true, page, at(16), kRemoteBounceMinBytes));
  EXPECT_FALSE(RemoteCopyBounces(/*write=*/true, page + 16, at(0), kRemoteBounceMinBytes));
  // Small transfers and unaliased ones go straight through.
  EXPECT_FALSE(RemoteCopyBounces(/*write=*/true, page, at(16), kRemoteBounceMinBytes - 1));
  EXPECT_FALSE(RemoteCopyBounces(/*write=*/false, page + 64, at(0), 1 << 20));
  EXPECT_FALSE(RemoteCopyBounces(/*write=*/false, page + 4096, at(0), 1 << 20));
}

// Which payloads travel in flagged lines: allreduces of 1 byte to 1 KiB;
// allgather and reduce_scatter blocks of 2-5 lines (57-280 bytes) while all
// the blocks a rank writes fit any full slot (n x lines <= 63); the layout
// of the small slot (7 lines) and of the smallest full one (63 lines).
TEST(FlaggedLinesTest, WhichPayloadsTravelInLines) {
  EXPECT_FALSE(AreaOp::LinesFit(0));
  EXPECT_TRUE(AreaOp::LinesFit(1));
  EXPECT_TRUE(AreaOp::LinesFit(1024));
  EXPECT_FALSE(AreaOp::LinesFit(1025));
  EXPECT_EQ(AreaOp::LinesOf(56), 1u);
  EXPECT_EQ(AreaOp::LinesOf(57), 2u);
  EXPECT_EQ(AreaOp::LinesOf(280), 5u);
  for (const uint64_t block : {uint64_t{0}, uint64_t{8}, uint64_t{56}, uint64_t{281}, uint64_t{1024}}) {
    EXPECT_FALSE(AreaOp::BlockLinesFit(block, 1)) << block;
  }
  for (const uint64_t block : {uint64_t{57}, uint64_t{100}, uint64_t{224}, uint64_t{280}}) {
    EXPECT_TRUE(AreaOp::BlockLinesFit(block, 1)) << block;
    EXPECT_TRUE(AreaOp::BlockLinesFit(block, 12)) << block;  // 12 x 5 = 60 lines
  }
  EXPECT_TRUE(AreaOp::BlockLinesFit(57, 31));  // 31 x 2 = 62 lines
  EXPECT_FALSE(AreaOp::BlockLinesFit(57, 32));  // 64 lines: more than the smallest full slot
  EXPECT_FALSE(AreaOp::BlockLinesFit(280, 13));
  // Header line and 7 lines fill a small slot; 63 lines the smallest full one.
  EXPECT_EQ(AreaOp::LineLayoutBytes(57, 3), 32u + 64 * 6);
  EXPECT_LE(AreaOp::LineLayoutBytes(112, 3), transport::kSmallSlotPayload);
  EXPECT_GT(AreaOp::LineLayoutBytes(113, 3), transport::kSmallSlotPayload);
  EXPECT_LE(AreaOp::LineLayoutBytes(57, 31), transport::kSlotMinCapacity);
}

TEST(SharedReduceStreamingTest, FromWhereTheBuffersLeaveTheLastLevelCache) {
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_EQ(SharedReduceStreamingBytes(2, false, 32 * kMiB), 8 * kMiB);    // the AMD host
  EXPECT_EQ(SharedReduceStreamingBytes(2, false, 260 * kMiB), 32 * kMiB);  // the Intel host: at most 32 MiB
  EXPECT_EQ(SharedReduceStreamingBytes(2, false, 48 * kMiB), 12 * kMiB);
  EXPECT_EQ(SharedReduceStreamingBytes(8, false, 32 * kMiB), 8 * kMiB);    // at least 8 MiB
  EXPECT_EQ(SharedReduceStreamingBytes(2, false, 0), 32 * kMiB);           // cache size unknown
  EXPECT_EQ(SharedReduceStreamingBytes(4, true, 260 * kMiB), 8 * kMiB);    // ranks share cores
  EXPECT_EQ(SharedReduceStreamingBytes(0, false, 32 * kMiB), 32 * kMiB);
}

TEST_F(RemoteCopyTest, AVanishedProcessIsPeerLost) {
  // A pid that cannot exist (beyond pid_max's ceiling): ESRCH.
  std::vector<uint8_t> buf(8192);
  const Status s = ReadRemote(1 << 30, 7, buf.data() + 16, reinterpret_cast<uint64_t>(buf.data()), 4096);
  EXPECT_EQ(s.code(), Code::kPeerLost) << s.ToString();
  EXPECT_NE(s.message().find("rank 7"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace choir::algorithms
