#include "choir/shared_buffer.h"

#include <utility>

#include "transport/shm/shared_buffers.h"

namespace choir {

Result<SharedBuffer> SharedBuffer::Allocate(size_t bytes) {
  auto p = transport::AllocateShared(bytes);
  if (!p.ok()) return p.status();
  return SharedBuffer(*p, bytes);
}

SharedBuffer::~SharedBuffer() { transport::ReleaseShared(data_); }

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    transport::ReleaseShared(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace choir
