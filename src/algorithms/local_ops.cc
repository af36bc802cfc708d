#include "algorithms/local_ops.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace choir::algorithms {

bool LocalGroupUsable(const Context& c) {
  const transport::LocalGroup* g = c.local_group();
  return g != nullptr && c.covers_whole_comm() && g->size() == c.size() && g->size() > 1;
}

AreaOp::AreaOp(Context& c) : ctx_(&c), group_(c.local_group()) {
  id_ = group_->next_id++;
  parity_ = static_cast<int>(id_ & 1);
}

Status AreaOp::Wait(const std::function<bool()>& ready, const std::function<std::string()>& what) {
  return ctx_->WaitLocal(ready, what);
}

Status AreaOp::Acquire() {
  if (id_ <= 2) return Status::Ok();
  const uint64_t need = id_ - 2;  // the previous operation that used this slot
  return Wait(
      [&] {
        for (int p = 0; p < size(); ++p) {
          if (p == me()) continue;
          if (group_->areas[static_cast<size_t>(p)].ctl()->read_done[parity_].load(std::memory_order_acquire) < need) {
            return false;
          }
        }
        return true;
      },
      [&] {
        std::string who;
        for (int p = 0; p < size(); ++p) {
          if (p != me() && group_->areas[static_cast<size_t>(p)].ctl()->read_done[parity_].load() < need) {
            who += (who.empty() ? "rank " : ", rank ") + std::to_string(group_->ranks[static_cast<size_t>(p)]);
          }
        }
        return who + " to finish reading this rank's shared slot";
      });
}

void AreaOp::Publish(uint64_t bytes) {
  transport::SlotHeader* h = group_->mine().slot(parity_);
  h->sig = ctx_->sig_word();
  h->count = ctx_->sig_count();
  h->bytes = bytes;
  h->id.store(id_, std::memory_order_release);
  group_->NotifyPeers();
}

Status AreaOp::CheckSignature(int p) const {
  const transport::SlotHeader* h = group_->areas[static_cast<size_t>(p)].slot(parity_);
  if (h->sig != ctx_->sig_word() || h->count != ctx_->sig_count()) {
    return ctx_->Mismatch(h->sig, h->count, group_->ranks[static_cast<size_t>(p)]);
  }
  return Status::Ok();
}

Status AreaOp::WaitFor(int p) {
  const transport::SlotHeader* h = group_->areas[static_cast<size_t>(p)].slot(parity_);
  CHOIR_RETURN_IF_ERROR(Wait([&] { return h->id.load(std::memory_order_acquire) == id_; },
                             [&] { return "rank " + std::to_string(group_->ranks[static_cast<size_t>(p)]) +
                                          " to arrive (same-host slot)"; }));
  return CheckSignature(p);
}

Status AreaOp::WaitAll() {
  CHOIR_RETURN_IF_ERROR(Wait(
      [&] {
        for (int p = 0; p < size(); ++p) {
          if (p != me() && group_->areas[static_cast<size_t>(p)].slot(parity_)->id.load(std::memory_order_acquire) != id_) {
            return false;
          }
        }
        return true;
      },
      [&] {
        std::string who;
        for (int p = 0; p < size(); ++p) {
          if (p != me() && group_->areas[static_cast<size_t>(p)].slot(parity_)->id.load() != id_) {
            who += (who.empty() ? "rank " : ", rank ") + std::to_string(group_->ranks[static_cast<size_t>(p)]);
          }
        }
        return who + " to arrive (same-host slots)";
      }));
  for (int p = 0; p < size(); ++p) {
    if (p != me()) CHOIR_RETURN_IF_ERROR(CheckSignature(p));
  }
  return Status::Ok();
}

void AreaOp::FinishReads() {
  group_->mine().ctl()->read_done[parity_].store(id_, std::memory_order_release);
  group_->NotifyPeers();
}

void AreaOp::SetProgress(uint64_t chunks_done) {
  group_->mine().ctl()->progress.store((id_ << transport::kProgressShift) | chunks_done, std::memory_order_release);
  group_->NotifyPeers();
}

Status AreaOp::WaitProgress(int p, uint64_t chunks) {
  const uint64_t want = (id_ << transport::kProgressShift) | chunks;
  const auto* ctl = group_->areas[static_cast<size_t>(p)].ctl();
  return Wait([&] { return ctl->progress.load(std::memory_order_acquire) >= want; },
              [&] { return "rank " + std::to_string(group_->ranks[static_cast<size_t>(p)]) +
                           " to finish its share (same-host single copy)"; });
}

Status AreaOp::Finish() {
  group_->mine().ctl()->finished.store(id_, std::memory_order_release);
  group_->NotifyPeers();
  return Wait(
      [&] {
        for (int p = 0; p < size(); ++p) {
          if (p != me() && group_->areas[static_cast<size_t>(p)].ctl()->finished.load(std::memory_order_acquire) < id_) {
            return false;
          }
        }
        return true;
      },
      [&] { return std::string("local ranks to finish reading this rank's buffers"); });
}

Status ReadRemote(int pid, int peer_rank, void* local, uint64_t remote, size_t bytes) {
  auto* dst = static_cast<uint8_t*>(local);
  while (bytes > 0) {
    iovec l{dst, bytes};
    iovec r{reinterpret_cast<void*>(remote), bytes};
    const ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got <= 0) {
      const int err = got < 0 ? errno : EIO;
      if (err == EINTR) continue;
      if (err == ESRCH) {
        return Status(Code::kPeerLost, fmt::format("rank {} (pid {}) exited during a same-host transfer", peer_rank, pid));
      }
      return ErrnoError(Code::kSystemError, err,
                        fmt::format("process_vm_readv of {} bytes from rank {} (pid {})", bytes, peer_rank, pid));
    }
    dst += got;
    remote += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

}  // namespace choir::algorithms
