// The doorbell protocol (segment.h): a sleeper that announces itself is never
// left sleeping after a notifier published, whether notifiers fence or rely
// on the sleeper's membarrier. The host-wide room check, the removal of
// segments that killed ranks left behind, and the slot rings mapped when a
// segment is created or opened.
#include "transport/shm/segment.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/fd.h"
#include "base/strings.h"
#include "testing/temp_dir.h"

namespace choir::transport {
namespace {

struct Shared {
  SegmentHeader header;
  alignas(64) std::atomic<uint64_t> value{0};  // what the sleeper waits for
  alignas(64) std::atomic<uint64_t> ack{0};    // the sleeper saw this value
  alignas(64) std::atomic<uint64_t> missed{0};
};

constexpr uint64_t kRounds = 50000;
constexpr int64_t kCapNs = 1'000'000'000;  // a missed wake-up sleeps this long

// Sleeps (never spins) until `value` reaches each round; counts sleeps that
// ran into the cap although the value had been published.
void Sleeper(Shared* s) {
  for (uint64_t i = 1; i <= kRounds; ++i) {
    while (s->value.load(std::memory_order_acquire) < i) {
      const uint32_t seen = s->header.doorbell.load(std::memory_order_acquire);
      const int64_t cap = AnnounceSleep(&s->header, kCapNs);
      if (s->value.load(std::memory_order_acquire) < i) {
        const int64_t t0 = NowNanos();
        WaitSegment(&s->header, seen, cap);
        // Only a missed wake-up sleeps the whole cap; a late one (a loaded
        // machine) returns well before it.
        if (NowNanos() - t0 >= kCapNs * 9 / 10) s->missed.fetch_add(1);
      }
      s->header.sleeping.store(0, std::memory_order_relaxed);
    }
    s->ack.store(i, std::memory_order_release);
    for (uint64_t k = i * 11 % 29; k > 0; --k) _mm_pause();
  }
}

// Publishes each round after a short, varying delay (and the sleeper
// announces after one too), so that publications land just before, during
// and after the announcement: without any barrier this misses wake-ups within
// every run or two of 50000 rounds on two cores.
void Notifier(Shared* s) {
  for (uint64_t i = 1; i <= kRounds; ++i) {
    while (s->ack.load(std::memory_order_acquire) + 1 < i) _mm_pause();
    for (uint64_t k = i * 37 % 61; k > 0; --k) _mm_pause();
    s->value.store(i, std::memory_order_release);
    NotifySegment(&s->header);
  }
}

Shared* MapShared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return new (p) Shared();
}

TEST(DoorbellTest, NoWakeUpIsLostBetweenThreads) {
  Shared* s = MapShared();
  ASSERT_NE(s, nullptr);
  RecordProperty("notifies_without_fence", NotifiesWithoutFence() ? "yes" : "no");
  std::thread notifier(Notifier, s);
  Sleeper(s);
  notifier.join();
  EXPECT_EQ(s->missed.load(), 0u);
  EXPECT_EQ(s->ack.load(), kRounds);
  munmap(s, sizeof(Shared));
}

TEST(DoorbellTest, NoWakeUpIsLostBetweenProcesses) {
  Shared* s = MapShared();
  ASSERT_NE(s, nullptr);
  NotifiesWithoutFence();  // registered before the fork: the child registers again on its own
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Notifier(s);
    _exit(0);
  }
  Sleeper(s);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(s->missed.load(), 0u);
  EXPECT_EQ(s->ack.load(), kRounds);
  munmap(s, sizeof(Shared));
}

// The segments of a host's ranks grow with the square of their number: the
// check refuses what the host cannot hold, naming what was needed, and lets
// through what it can (or what it cannot measure).
TEST(SegmentRoomTest, RefusesMoreRanksThanTheHostCanHold) {
  const choir::testing::TempDir dir("choir-room");
  const std::string meminfo = dir.path() + "/meminfo";
  std::ofstream(meminfo) << "MemTotal:       24576000 kB\nMemAvailable:   20000000 kB\n";
  constexpr size_t kRing = 2 << 20, kSlot = 64 << 10, kPipe = 4 << 20;
  // One rank makes no segment; 8 ranks need 8 x (8 rings + areas), well under 24 GB.
  EXPECT_TRUE(Segment::CheckRoom(1, kRing, kSlot, kPipe, dir.path(), meminfo).ok());
  EXPECT_TRUE(Segment::CheckRoom(8, kRing, kSlot, kPipe, dir.path() + "/none", meminfo).ok());
  // 1000 ranks: 1000 segments of 1000 rings of 2 MiB, about 1.9 TiB.
  const Status s = Segment::CheckRoom(1000, kRing, kSlot, kPipe, dir.path() + "/none", meminfo);
  ASSERT_EQ(s.code(), Code::kOutOfMemory) << s.ToString();
  const uint64_t each = Segment::TotalBytes(1000, kRing, kSlot, kPipe);
  EXPECT_NE(s.message().find("1000 ranks on this host need " + strings::FormatBytes(each * 1000)), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("CHOIR_SHM_RING_BYTES"), std::string::npos) << s.message();
  // Where the sizes cannot be read, nothing is refused.
  EXPECT_TRUE(Segment::CheckRoom(1000, kRing, kSlot, kPipe, dir.path() + "/none", dir.path() + "/none").ok());
}

// The launcher removes the segments of ranks killed before they unlinked
// them: only files named for the given processes whose header names that
// process (or that are still empty), never another job's or a stranger's.
TEST(SegmentRoomTest, RemovesOnlyTheSegmentsOfTheGivenProcesses) {
  const choir::testing::TempDir dir("choir-left");
  auto path = [&](const std::string& name) { return dir.path() + "/" + name.substr(1); };
  auto make = [&](const std::string& name, uint64_t magic, int pid) {
    SegmentHeader h{};
    h.magic = magic;
    h.pid = pid;
    std::ofstream(path(name), std::ios::binary).write(reinterpret_cast<const char*>(&h), sizeof(h));
  };
  const std::string mine1 = Segment::NameFor("job/comm", 0, 4242);
  const std::string mine2 = Segment::NameFor("job/comm", 1, 4243);
  const std::string empty = Segment::NameFor("job/comm", 2, 4243);
  const std::string other_pid = Segment::NameFor("job/comm", 2, 42430);
  const std::string stranger = Segment::NameFor("other/comm", 3, 4242);  // not a segment
  const std::string foreign = Segment::NameFor("other/comm", 4, 4243);   // a segment of another process
  make(mine1, kSegmentMagic, 4242);
  make(mine2, kSegmentMagic, 4243);
  std::ofstream(path(empty)).close();
  make(other_pid, kSegmentMagic, 42430);
  std::ofstream(path(stranger)) << "not a segment";
  make(foreign, kSegmentMagic, 777);
  std::ofstream(dir.path() + "/unrelated-4242") << "x";
  EXPECT_EQ(Segment::RemoveLeftBy({4242, 4243}, dir.path()), 3);
  EXPECT_FALSE(std::filesystem::exists(path(mine1)));
  EXPECT_FALSE(std::filesystem::exists(path(mine2)));
  EXPECT_FALSE(std::filesystem::exists(path(empty)));
  EXPECT_TRUE(std::filesystem::exists(path(other_pid)));
  EXPECT_TRUE(std::filesystem::exists(path(stranger)));
  EXPECT_TRUE(std::filesystem::exists(path(foreign)));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/unrelated-4242"));
  EXPECT_EQ(Segment::RemoveLeftBy({}, dir.path()), 0);
  EXPECT_EQ(Segment::RemoveLeftBy({4242}, dir.path() + "/none"), 0);
  EXPECT_EQ(strings::FormatRanks({0, 2, 5, 6, 7, 8, 9, 11, 12}), "0,2,5-9,11,12");
  EXPECT_EQ(strings::FormatRanks({}), "");
}

// Sizes beyond what CheckSizes allows are refused before any product of them
// is formed (a ring of 2^62 bytes wrapped the total around to a small one).
TEST(SegmentRoomTest, RefusesSizesThatWouldOverflow) {
  EXPECT_EQ(Segment::CheckRoom(4, size_t{1} << 62, 64 << 10, 4 << 20).code(), Code::kInvalidSetting);
  EXPECT_EQ(Segment::CheckRoom(4, (size_t{1} << 30) + 64, 64 << 10, 4 << 20).code(), Code::kInvalidSetting);
  const Status s = Segment::CheckRoom(1 << 30, size_t{1} << 30, 64 << 10, 4 << 20);
  EXPECT_EQ(s.code(), Code::kOutOfMemory) << s.ToString();
}

// Whether pages are mapped in this process (bit 63 of their
// /proc/self/pagemap entries).
class PageMap {
 public:
  PageMap() : fd_(open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC)) {}
  // False when the map cannot be read or shows no page as mapped (some
  // sandboxes): a stack page is mapped.
  bool Works() const {
    const volatile int here = 1;
    return Mapped(const_cast<const int*>(&here));
  }
  bool Mapped(const void* p) const {
    uint64_t entry = 0;
    const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / 4096 * sizeof(entry));
    return pread(fd_.get(), &entry, sizeof(entry), at) == static_cast<ssize_t>(sizeof(entry)) && (entry >> 63) != 0;
  }
  // Pages holding [p, p + bytes) that are not mapped.
  size_t Unmapped(const void* p, size_t bytes) const {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    size_t count = 0;
    for (uintptr_t page = at / 4096 * 4096; page < at + bytes; page += 4096) {
      count += Mapped(reinterpret_cast<const void*>(page)) ? 0 : 1;
    }
    return count;
  }

 private:
  Fd fd_;
};

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// The owner's mapping and a peer's both have the header, the control lines
// and the slots mapped at once, of a full slot its first
// kMappedFullSlotBytes; the pipe is left to its first touch.
TEST(SegmentMapTest, CreateAndOpenMapTheSlotsButNotThePipe) {
  const PageMap pages;
  if (!pages.Works()) GTEST_SKIP() << "/proc/self/pagemap shows no mapped page here";
  constexpr size_t kRing = 64 << 10, kPipe = 4 << 20;
  for (const size_t slot_bytes : {size_t{64} << 10, size_t{1} << 20}) {
    SCOPED_TRACE("CHOIR_SHM_SLOT_BYTES " + std::to_string(slot_bytes));
    const std::string name = Segment::NameFor("segment-map-test-" + std::to_string(slot_bytes), 0, getpid());
    auto owner = Segment::Create(name, 0, 2, kRing, slot_bytes, kPipe, 77);
    ASSERT_TRUE(owner.ok()) << owner.status().ToString();
    auto peer = Segment::Open(name, 0, 77);
    (*owner)->Unlink();
    ASSERT_TRUE(peer.ok()) << peer.status().ToString();
    for (const Segment* seg : {owner->get(), peer->get()}) {
      SCOPED_TRACE(seg == owner->get() ? "owner" : "peer");
      const AreaView area = seg->area();
      EXPECT_EQ(pages.Unmapped(seg->header(), 4096 + kAreaCtlBytes), 0u);
      const size_t mapped = std::min(SlotStride(slot_bytes), Segment::kMappedFullSlotBytes);
      for (int b = 0; b < kAreaSlots; ++b) {
        EXPECT_EQ(pages.Unmapped(area.slot(b), mapped), 0u) << "full slot " << b;
      }
      if (SlotStride(slot_bytes) > mapped + (64 << 10)) {
        // Past the mapped part (and any neighbouring pages a read fault maps with it).
        EXPECT_FALSE(pages.Mapped(reinterpret_cast<const uint8_t*>(area.slot(3)) + mapped + (32 << 10)));
      }
      EXPECT_EQ(pages.Unmapped(area.small_slot(0), kSmallSlots * kSmallSlotStride), 0u);
      EXPECT_EQ(pages.Unmapped(area.medium_slot(0), kMediumSlots * kMediumSlotStride), 0u);
      EXPECT_FALSE(pages.Mapped(area.pipe() + kPipe / 2)) << "the middle of the pipe was mapped";
    }
  }
}

// MapPagesNow maps the pages that hold its range writable, through the
// kernel's populate call or by reading each page: writing them afterwards
// takes no page faults, where a fresh mapping takes one per page.
TEST(SegmentMapTest, MapPagesNowMapsEveryPageWritable) {
  const PageMap pages;
  if (!pages.Works()) GTEST_SKIP() << "/proc/self/pagemap shows no mapped page here";
  const std::string name = "/choir-map-pages-test-" + std::to_string(getpid());
  constexpr size_t kPages = 64, kBytes = kPages * 4096;
  const Fd fd(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  shm_unlink(name.c_str());
  ASSERT_EQ(posix_fallocate(fd.get(), 0, kBytes), 0);
  // how: 0 nothing before the writes, 1 the populate call, 2 the reads.
  auto writes_fault = [&](int how) {
    void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) {
      ADD_FAILURE() << "mmap: " << std::strerror(errno);
      return -1L;
    }
    auto* bytes = static_cast<volatile uint8_t*>(p);
    // From 100 bytes into the first page: the pages that hold the range.
    if (how > 0) MapPagesNow(const_cast<uint8_t*>(bytes) + 100, kBytes - 100, /*use_madvise=*/how == 1);
    EXPECT_EQ(pages.Unmapped(p, kBytes), how > 0 ? 0 : kPages) << "how " << how;
    const long before = MinorFaults();
    for (size_t i = 0; i < kPages; ++i) bytes[i * 4096] = static_cast<uint8_t>(i + 1);
    const long faults = MinorFaults() - before;
    for (size_t i = 0; i < kPages; ++i) EXPECT_EQ(bytes[i * 4096], static_cast<uint8_t>(i + 1));
    munmap(p, kBytes);
    return faults;
  };
  const long fresh = writes_fault(0);
  if (fresh >= 0 && fresh < static_cast<long>(kPages)) {
    GTEST_SKIP() << "a fresh mapping took " << fresh << " faults for " << kPages
                 << " pages (large folios): faults cannot tell mapped pages here";
  }
  EXPECT_GE(fresh, static_cast<long>(kPages));
  EXPECT_LE(writes_fault(1), 2L);
  EXPECT_LE(writes_fault(2), 2L);
}

// Which ring an operation's payload takes, and where the rings lie in an
// area: one after another, none overlapping, the pipe after the last, and
// the whole inside AreaBytes.
TEST(LocalAreaTest, EachPayloadHasOneRingAndTheRingsDoNotOverlap) {
  EXPECT_EQ(RingFor(0), Ring::kSmall);
  EXPECT_EQ(RingFor(kSmallSlotPayload), Ring::kSmall);
  EXPECT_EQ(RingFor(kSmallSlotPayload + 1), Ring::kMedium);
  EXPECT_EQ(RingFor(16 * 1024), Ring::kMedium);
  EXPECT_EQ(RingFor(kMediumSlotPayload), Ring::kMedium);
  EXPECT_EQ(RingFor(kMediumSlotPayload + 1), Ring::kFull);
  EXPECT_EQ(RingFor(SIZE_MAX), Ring::kFull);
  EXPECT_EQ(kSmallSlotPayload, 480u);
  EXPECT_EQ(kMediumSlotPayload, 16u * 1024 + 32);
  EXPECT_EQ(RingDepth(Ring::kSmall), 64);
  EXPECT_EQ(RingDepth(Ring::kMedium), 64);
  EXPECT_EQ(RingDepth(Ring::kFull), 8);

  const size_t slot_bytes = 64 << 10, pipe_bytes = 4 << 20;
  std::vector<uint8_t> memory(AreaBytes(slot_bytes, pipe_bytes));
  const AreaView area(memory.data(), slot_bytes, pipe_bytes);
  auto at = [&](const void* p) { return static_cast<size_t>(static_cast<const uint8_t*>(p) - memory.data()); };
  size_t next = kAreaCtlBytes;  // the rings in order: full, small, medium
  for (const Ring r : {Ring::kFull, Ring::kSmall, Ring::kMedium}) {
    const size_t stride = r == Ring::kFull ? SlotStride(slot_bytes) : r == Ring::kSmall ? kSmallSlotStride : kMediumSlotStride;
    for (int b = 0; b < RingDepth(r); ++b) {
      EXPECT_EQ(at(area.ring_slot(r, b)), next) << static_cast<int>(r) << " slot " << b;
      EXPECT_EQ(at(area.ring_data(r, b)), next + sizeof(SlotHeader));
      EXPECT_EQ(at(area.ring_slot(r, b)) % 64, 0u);
      next += stride;
    }
  }
  EXPECT_EQ(at(area.pipe()), next);
  EXPECT_EQ(next + pipe_bytes, memory.size());
}

}  // namespace
}  // namespace choir::transport
