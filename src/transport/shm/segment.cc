#include "transport/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "base/fd.h"
#include "base/files.h"
#include "base/logging.h"
#include "base/strings.h"

// Linux 5.14; C libraries before glibc 2.35 lack the name.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace choir::transport {
namespace {
constexpr size_t kHeaderBytes = 4096;

size_t SlotBytes(size_t ring_bytes) { return sizeof(RingCtl) + ring_bytes; }

Status ShmFailure(int err, const std::string& what) {
  std::string hint;
  if (err == ENOSPC || err == ENOMEM || err == EFBIG) {
    hint = "; /dev/shm is full or too small (containers default to 64 MB: use --shm-size), "
           "lower CHOIR_SHM_RING_BYTES or CHOIR_SHM_PIPE_BYTES, or use CHOIR_TRANSPORT=tcp";
  } else if (err == ENOENT) {
    hint = "; the peer's segment is not visible here: ranks with the same host id must share "
           "/dev/shm (give each host its own CHOIR_HOST_ID, or use CHOIR_TRANSPORT=tcp)";
  }
  return Status(Code::kShmError, what + ": " + std::strerror(err) + hint);
}

size_t RingsOffset(size_t area_slot_bytes, size_t area_pipe_bytes) {
  return kHeaderBytes + (AreaBytes(area_slot_bytes, area_pipe_bytes) + 4095) / 4096 * 4096;
}

}  // namespace

void MapPagesNow(void* base, size_t bytes, bool use_madvise) {
  if (bytes == 0) return;
  const uintptr_t first = reinterpret_cast<uintptr_t>(base) / 4096 * 4096;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(base) + bytes + 4095) / 4096 * 4096;
  auto* from = reinterpret_cast<uint8_t*>(first);
  if (use_madvise && madvise(from, end - first, MADV_POPULATE_WRITE) == 0) return;
  const auto* p = reinterpret_cast<const volatile uint8_t*>(first);
  for (uintptr_t off = 0; off < end - first; off += 4096) (void)p[off];
}

namespace {

// The header, the control lines and the slots of a segment mapped at
// `base`: of each full slot its first Segment::kMappedFullSlotBytes, the
// whole of a slot of the default CHOIR_SHM_SLOT_BYTES (64 KiB), so that a
// large setting does not map hundreds of MiB per peer. On the Zen 4 host,
// 100 calls (after 10) of each collective at 1-16 KiB took 1.8x-3.5x less
// time with 2 ranks, up to 3.9x less with 4 (docs/performance-log.md, "The
// slot rings mapped at once").
void MapSlots(uint8_t* base, size_t area_slot_bytes) {
  const AreaView area(base + kHeaderBytes, area_slot_bytes, 0);
  MapPagesNow(base, kHeaderBytes + kAreaCtlBytes);
  const size_t per_slot = std::min(SlotStride(area_slot_bytes), Segment::kMappedFullSlotBytes);
  for (int b = 0; b < kAreaSlots; ++b) MapPagesNow(area.slot(b), per_slot);
  MapPagesNow(area.small_slot(0), kSmallSlots * kSmallSlotStride + kMediumSlots * kMediumSlotStride);
}

}  // namespace

size_t Segment::TotalBytes(int num_slots, size_t ring_bytes, size_t area_slot_bytes, size_t area_pipe_bytes) {
  return RingsOffset(area_slot_bytes, area_pipe_bytes) + static_cast<size_t>(num_slots) * SlotBytes(ring_bytes);
}

RingCtl* Segment::ring_ctl(int slot) const {
  return reinterpret_cast<RingCtl*>(base_ + RingsOffset(header()->area_slot_bytes, header()->area_pipe_bytes) +
                                    static_cast<size_t>(slot) * SlotBytes(ring_bytes()));
}

Status Segment::CheckSizes(size_t ring_bytes, size_t area_slot_bytes, size_t area_pipe_bytes) {
  if (ring_bytes < 4096 || ring_bytes % 64 != 0 || ring_bytes > (1u << 30)) {
    return Status(Code::kInvalidSetting,
                  "CHOIR_SHM_RING_BYTES must be a multiple of 64 from 4096 to 1G, got " + std::to_string(ring_bytes));
  }
  if (area_slot_bytes < 64 || area_slot_bytes > (64u << 20)) {
    return Status(Code::kInvalidSetting, "CHOIR_SHM_SLOT_BYTES must be between 64 and 64M, got " +
                                             std::to_string(area_slot_bytes));
  }
  if (area_pipe_bytes > (1u << 30) || area_pipe_bytes % 4096 != 0) {
    return Status(Code::kInvalidSetting, "CHOIR_SHM_PIPE_BYTES must be 0 or a multiple of 4096 up to 1G, got " +
                                             std::to_string(area_pipe_bytes));
  }
  return Status::Ok();
}

Status Segment::CheckRoom(int local_ranks, size_t ring_bytes, size_t area_slot_bytes, size_t area_pipe_bytes,
                          const std::string& shm_dir, const std::string& meminfo) {
  if (local_ranks < 2) return Status::Ok();  // a rank alone makes no segment
  CHOIR_RETURN_IF_ERROR(CheckSizes(ring_bytes, area_slot_bytes, area_pipe_bytes));
  // Within 64 bits after CheckSizes for any int count of ranks (2^31 x 2^31 x 2^30
  // is not, so the product is checked).
  const uint64_t each = TotalBytes(local_ranks, ring_bytes, area_slot_bytes, area_pipe_bytes);
  uint64_t need = 0;
  if (__builtin_mul_overflow(each, static_cast<uint64_t>(local_ranks), &need)) need = UINT64_MAX;
  struct statvfs fs {};
  const uint64_t shm_bytes =
      statvfs(shm_dir.c_str(), &fs) == 0 ? static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize : 0;
  const uint64_t memory = files::ReadMeminfoBytes("MemTotal", meminfo);
  // Unknown sizes are not held against the job.
  const bool too_big_for_shm = shm_bytes > 0 && need > shm_bytes;
  const bool too_big_for_memory = memory > 0 && need > memory;
  if (!too_big_for_shm && !too_big_for_memory) return Status::Ok();
  return Status(Code::kOutOfMemory,
                fmt::format("{} ranks on this host need {} of shared memory ({} segments of {}, each with a {} "
                            "ring from every local rank), but {} holds {} and the host has {} of memory: "
                            "start fewer ranks per host, lower CHOIR_SHM_RING_BYTES, or use CHOIR_TRANSPORT=tcp",
                            local_ranks, strings::FormatBytes(need), local_ranks, strings::FormatBytes(each),
                            strings::FormatBytes(ring_bytes), shm_dir, strings::FormatBytes(shm_bytes),
                            strings::FormatBytes(memory)));
}

std::string Segment::NameFor(const std::string& job_key, int rank, int pid) {
  return fmt::format("/choir-{:016x}-{}-{}", strings::HashString(job_key), rank, pid);
}

namespace {

// Whether the file `path` is a segment that process `pid` made: its header
// says so, or it is empty (killed between creating the name and reserving
// the pages).
bool MadeBy(const std::string& path, int pid) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat st {};
  if (!fd.valid() || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (st.st_size == 0) return true;
  uint64_t magic = 0;
  int32_t owner = 0;
  return pread(fd.get(), &magic, sizeof(magic), offsetof(SegmentHeader, magic)) == sizeof(magic) &&
         pread(fd.get(), &owner, sizeof(owner), offsetof(SegmentHeader, pid)) == sizeof(owner) &&
         magic == kSegmentMagic && owner == pid;
}

}  // namespace

int Segment::RemoveLeftBy(const std::vector<int>& pids, const std::string& shm_dir) {
  if (pids.empty()) return 0;
  DIR* dir = opendir(shm_dir.c_str());
  if (dir == nullptr) return 0;
  std::vector<std::string> doomed;
  while (const dirent* e = readdir(dir)) {
    const std::string_view name = e->d_name;
    if (!strings::StartsWith(name, "choir-")) continue;
    const size_t dash = name.rfind('-');
    const auto pid = strings::ParseInt(name.substr(dash + 1));
    if (pid && std::find(pids.begin(), pids.end(), *pid) != pids.end() &&
        MadeBy(shm_dir + "/" + std::string(name), static_cast<int>(*pid))) {
      doomed.emplace_back(name);
    }
  }
  closedir(dir);
  int removed = 0;
  for (const std::string& name : doomed) {
    if (unlink((shm_dir + "/" + name).c_str()) == 0) ++removed;
  }
  if (removed > 0) CHOIR_LOG(Info, SHM, "removed {} shared-memory segments left by stopped ranks", removed);
  return removed;
}

Result<std::unique_ptr<Segment>> Segment::Create(const std::string& name, int rank, int num_slots,
                                                 size_t ring_bytes, size_t area_slot_bytes,
                                                 size_t area_pipe_bytes, uint64_t token) {
  CHOIR_RETURN_IF_ERROR(CheckSizes(ring_bytes, area_slot_bytes, area_pipe_bytes));
  // Register for the doorbell barrier now rather than in the first
  // collective's first publication (registering can take milliseconds).
  (void)NotifiesWithoutFence();
  const size_t bytes = TotalBytes(num_slots, ring_bytes, area_slot_bytes, area_pipe_bytes);
  Fd fd(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return ShmFailure(errno, "shm_open(" + name + ", create)");
  // Reserve the pages now so that a full /dev/shm fails here, not with SIGBUS later.
  const int rc = posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    shm_unlink(name.c_str());
    return ShmFailure(rc, "reserving " + strings::FormatBytes(bytes) + " for " + name);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    shm_unlink(name.c_str());
    return ShmFailure(err, "mmap(" + name + ")");
  }
  MapSlots(static_cast<uint8_t*>(base), area_slot_bytes);  // not in the first operations through them
  auto* h = new (base) SegmentHeader();
  h->magic = kSegmentMagic;
  h->layout_version = kSegmentLayoutVersion;
  h->rank = rank;
  h->pid = getpid();
  h->num_slots = num_slots;
  h->ring_bytes = ring_bytes;
  h->token = token;
  h->area_slot_bytes = area_slot_bytes;
  h->area_pipe_bytes = area_pipe_bytes;
  h->self_addr = reinterpret_cast<uint64_t>(base);
  h->doorbell.store(0);
  h->sleeping.store(0);
  h->abort_code.store(0);
  h->departed.store(0);
  auto seg = std::unique_ptr<Segment>(new Segment(name, base, bytes, /*owner=*/true));
  const AreaView area = seg->area();
  auto* actl = new (area.ctl()) AreaCtl();
  actl->read_through.store(0);
  actl->progress.store(0);
  actl->finished.store(0);
  actl->consumed.store(0);
  for (const Ring r : kRings) {
    for (int b = 0; b < RingDepth(r); ++b) new (area.ring_slot(r, b)) SlotHeader{{0}, 0, 0, 0};
  }
  for (int s = 0; s < num_slots; ++s) {
    auto* ctl = new (seg->ring_ctl(s)) RingCtl();
    ctl->head.store(0);
    ctl->tail.store(0);
  }
  CHOIR_LOG(Debug, SHM, "created segment {} ({} slots x {})", name, num_slots,
            strings::FormatBytes(ring_bytes));
  return seg;
}

Result<std::unique_ptr<Segment>> Segment::Open(const std::string& name, int expected_rank,
                                               uint64_t expected_token) {
  Fd fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) return ShmFailure(errno, "shm_open(" + name + ") of rank " + std::to_string(expected_rank));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) < kHeaderBytes) {
    return Status(Code::kShmError, "segment " + name + " of rank " + std::to_string(expected_rank) +
                                       " is truncated");
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return ShmFailure(errno, "mmap(" + name + ")");
  auto seg = std::unique_ptr<Segment>(new Segment(name, base, bytes, /*owner=*/false));
  const SegmentHeader* h = seg->header();
  if (h->magic != kSegmentMagic || h->layout_version != kSegmentLayoutVersion ||
      h->rank != expected_rank || h->token != expected_token || h->num_slots <= 0 ||
      !CheckSizes(h->ring_bytes, h->area_slot_bytes, h->area_pipe_bytes).ok() ||
      TotalBytes(h->num_slots, h->ring_bytes, h->area_slot_bytes, h->area_pipe_bytes) != bytes) {
    return Status(Code::kShmError,
                  "segment " + name + " does not belong to rank " + std::to_string(expected_rank) +
                      " of this communicator (stale file or another choir version)");
  }
  MapSlots(static_cast<uint8_t*>(base), h->area_slot_bytes);  // as Create does
  return seg;
}

Segment::~Segment() {
  if (owner_) Unlink();
  munmap(base_, bytes_);
}

void Segment::Unlink() {
  if (owner_ && !unlinked_) {
    shm_unlink(name_.c_str());
    unlinked_ = true;
  }
}

namespace {
long Futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

long Membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

// 1: registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED; -1: not available (old
// kernel, seccomp); 0: not tried yet in this process (a forked child tries
// again: the registration belongs to the address space).
std::atomic<int> g_barrier_registered{0};

}  // namespace

bool NotifiesWithoutFence() {
  int state = g_barrier_registered.load(std::memory_order_acquire);
  if (state == 0) {
    static const int at_fork = pthread_atfork(nullptr, nullptr, [] { g_barrier_registered.store(0); });
    (void)at_fork;
    state = Membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0 ? 1 : -1;
    g_barrier_registered.store(state, std::memory_order_release);
  }
  return state > 0;
}

void NotifySegment(SegmentHeader* h) {
  if (NotifiesWithoutFence()) {
    // The sleeper's membarrier orders our publication before its re-check.
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  if (h->sleeping.load(std::memory_order_relaxed) != 0) ForceWakeSegment(h);
}

int64_t AnnounceSleep(SegmentHeader* h, int64_t want_ns) {
  h->sleeping.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Every registered notifier that published before seeing the flag has its
  // publication visible once this returns; later ones see the flag.
  if (Membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return want_ns;
  return std::min<int64_t>(want_ns, 1'000'000);
}

void ForceWakeSegment(SegmentHeader* h) {
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  Futex(&h->doorbell, FUTEX_WAKE, INT_MAX, nullptr);
}

void WaitSegment(SegmentHeader* h, uint32_t seen, int64_t timeout_ns) {
  if (timeout_ns <= 0) return;
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  Futex(&h->doorbell, FUTEX_WAIT, seen, &ts);
}

}  // namespace choir::transport
