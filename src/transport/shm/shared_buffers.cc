#include "transport/shm/shared_buffers.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "base/files.h"
#include "base/strings.h"

namespace choir::transport {
namespace {

struct Region {
  uint64_t id;
  size_t bytes;
  int fd;
  uint64_t inode;
};

// Every live shared buffer of this process, by address.
struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Region> by_base;
  uint64_t next_id = 1;
};

Registry& TheRegistry() {
  // Never destroyed: buffers may outlive static destruction. A fork while
  // another thread holds the lock must not leave the child's copy locked.
  static Registry* r = [] {
    auto* reg = new Registry;
    pthread_atfork([] { TheRegistry().mu.lock(); }, [] { TheRegistry().mu.unlock(); },
                   [] { TheRegistry().mu.unlock(); });
    return reg;
  }();
  return *r;
}

// System calls without glibc wrappers usable from C++ here (Debian 12's
// <sys/pidfd.h> lacks extern "C").
int PidfdOpen(int pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }
int PidfdGetfd(int pidfd, int fd) { return static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0)); }

Status Failure(int err, const std::string& what, const std::string& hint) {
  return Status(Code::kShmError, what + ": " + std::strerror(err) + hint);
}

}  // namespace

Result<void*> AllocateShared(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (bytes == 0 || bytes > (size_t{1} << 46)) {
    return Status(Code::kInvalidArgument, "a shared buffer needs between 1 byte and 64 TiB, got " +
                                              std::to_string(bytes) + " bytes");
  }
  const size_t rounded = (bytes + page - 1) / page * page;
  // The mapping is populated at once: more than the host has free would
  // bring the out-of-memory killer instead of an error.
  if (const uint64_t available = files::ReadMeminfoBytes("MemAvailable");
      available > 0 && rounded > available) {
    return Status(Code::kOutOfMemory,
                  fmt::format("a shared buffer of {} does not fit the {} of memory this host has "
                              "available (MemAvailable); allocate less or free memory first",
                              strings::FormatBytes(rounded), strings::FormatBytes(available)));
  }
  const int fd = memfd_create("choir-buffer", MFD_CLOEXEC);
  if (fd < 0) return Failure(errno, "memfd_create for a shared buffer", "; too many open files? raise ulimit -n");
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    const int err = errno;
    close(fd);
    return Failure(err, "sizing a shared buffer of " + std::to_string(rounded) + " bytes", "");
  }
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return Failure(err, "mapping a shared buffer of " + std::to_string(rounded) + " bytes",
                   "; not enough memory (memfd pages count against the memory cgroup)");
  }
  struct stat st {};
  fstat(fd, &st);
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.by_base[reinterpret_cast<uintptr_t>(p)] = Region{r.next_id++, rounded, fd, static_cast<uint64_t>(st.st_ino)};
  return p;
}

void ReleaseShared(void* data) {
  if (data == nullptr) return;
  Registry& r = TheRegistry();
  Region region{};
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.by_base.find(reinterpret_cast<uintptr_t>(data));
    if (it == r.by_base.end()) return;
    region = it->second;
    r.by_base.erase(it);
  }
  munmap(data, region.bytes);
  close(region.fd);
}

SharedRef FindShared(const void* p, size_t bytes) {
  if (p == nullptr) return {};
  const auto addr = reinterpret_cast<uintptr_t>(p);
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_base.upper_bound(addr);
  if (it == r.by_base.begin()) return {};
  --it;
  const uintptr_t base = it->first;
  const Region& region = it->second;
  if (addr - base > region.bytes || bytes > region.bytes - (addr - base)) return {};
  return SharedRef{region.id, base, region.bytes, region.fd, region.inode};
}

PeerBufferMaps::~PeerBufferMaps() {
  for (const Entry& e : entries_) munmap(e.base, e.bytes);
  for (const auto& [pid, fd] : pidfds_) close(fd);
}

Result<uint8_t*> PeerBufferMaps::Map(int pid, int peer_rank, const SharedRef& ref) {
  ++clock_;
  for (Entry& e : entries_) {
    if (e.pid == pid && e.id == ref.id) {
      e.last_use = clock_;
      return e.base;
    }
  }
  if (unavailable_) return static_cast<uint8_t*>(nullptr);
  const std::string who = "the shared buffer of rank " + std::to_string(peer_rank) + " (pid " + std::to_string(pid) + ")";
  // Refusals that say "not here" rather than "not this buffer".
  auto refused = [this](int err) {
    const bool not_here = err == ENOSYS || err == EPERM || err == EACCES;
    if (not_here) unavailable_ = true;
    return not_here || err == ESRCH;
  };
  // A rank of this very process (threads as ranks) gets a mapping of its
  // own too, so that a rank that frees its buffer early (after an abort)
  // cannot pull the memory from under a peer that still copies.
  int fd = -1;
  if (pid == getpid()) {
    fd = dup(static_cast<int>(ref.fd));
  } else {
    auto pidfd_it = pidfds_.find(pid);
    if (pidfd_it == pidfds_.end()) {
      const int pidfd = PidfdOpen(pid);
      if (pidfd < 0) {
        const int err = errno;
        if (refused(err)) return static_cast<uint8_t*>(nullptr);
        return Failure(err, "pidfd_open for " + who, "");
      }
      pidfd_it = pidfds_.emplace(pid, pidfd).first;
    }
    fd = PidfdGetfd(pidfd_it->second, static_cast<int>(ref.fd));
  }
  if (fd < 0) {
    const int err = errno;
    if (refused(err)) return static_cast<uint8_t*>(nullptr);
    return Failure(err, "pidfd_getfd for " + who,
                   "; its owner closed the descriptor: a SharedBuffer was destroyed while a collective used it");
  }
  // The number may have been reused for another file after the buffer died.
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != ref.inode ||
      static_cast<uint64_t>(st.st_size) < ref.bytes) {
    close(fd);
    return Status(Code::kShmError, who + " is no longer the buffer it published (destroyed while a collective "
                                         "used it?): keep SharedBuffers alive until their collectives finish");
  }
  void* p = mmap(nullptr, ref.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) return Failure(err, "mapping " + who, "");
  if (entries_.size() >= kMaxMappings) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    if (oldest->last_use < op_start_) {
      munmap(oldest->base, oldest->bytes);
      entries_.erase(oldest);
    }
  }
  entries_.push_back(Entry{pid, ref.id, static_cast<uint8_t*>(p), ref.bytes, clock_});
  return static_cast<uint8_t*>(p);
}

}  // namespace choir::transport
