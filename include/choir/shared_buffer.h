// Buffers the ranks of one host can read from each other directly.
//
// Pass memory from a SharedBuffer as the send and receive buffers of large
// collectives, on every rank of a host, and the same-host algorithms read and
// write the peers' buffers with plain loads and stores: no copy through the
// kernel (process_vm_readv) and no staging pipe. Ranks whose buffers are
// ordinary memory still work with ranks whose buffers are shared; the fast
// path runs when every rank's buffers are. It needs the permission
// process_vm_readv needs (CHOIR_SHM_CMA=auto and a kernel that allows it);
// without it the same call takes the ordinary path.
//
//   auto buf = choir::SharedBuffer::Allocate(64 << 20);
//   if (!buf.ok()) ...;                          // E305 ShmError
//   float* x = buf->as<float>();
//   comm->Allreduce(x, x, n, DataType::kFloat32, ReduceOp::kSum).Wait();
//
// Any address range inside the buffer may be used (sub-ranges, offsets). The
// memory is zero-filled and faulted in at allocation. After a buffer is
// destroyed, a peer that mapped it keeps its pages alive until that peer's
// communicator is destroyed or drops the mapping (64 kept per communicator).
// Where a peer cannot take the buffer's descriptor over (pidfd_getfd missing
// or refused), collectives copy through the kernel as for ordinary memory.
// Unlike heap memory, a SharedBuffer stays shared with a child after fork():
// writes on either side are seen by the other.
//
// Thread-safety: Allocate may be called from any thread; one SharedBuffer is
// like any other memory.
#ifndef CHOIR_SHARED_BUFFER_H_
#define CHOIR_SHARED_BUFFER_H_

#include <cstddef>

#include "choir/status.h"

namespace choir {

class SharedBuffer {
 public:
  // At least `bytes` of shared memory (whole pages). InvalidArgument for 0,
  // ShmError when the memory or a file descriptor cannot be had.
  static Result<SharedBuffer> Allocate(size_t bytes);

  SharedBuffer() = default;
  ~SharedBuffer();
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  SharedBuffer(void* data, size_t size) : data_(data), size_(size) {}
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace choir

#endif  // CHOIR_SHARED_BUFFER_H_
