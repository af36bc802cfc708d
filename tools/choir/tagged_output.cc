#include "tagged_output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace choir::cli {

void WriteAllOrDrop(int fd, std::string_view data) {
  int stalls = 0;
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && stalls++ < 50) {
      // Our stdout was left non-blocking by whoever started us; wait a little
      // for the reader rather than dropping the line at once.
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
      continue;
    }
    return;  // EPIPE, EBADF or a reader that stays stuck: drop.
  }
}

void TaggedStream::Feed(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      pending_.append(bytes);
      while (pending_.size() >= kMaxLineBytes) {
        EmitLine(std::string_view(pending_).substr(0, kMaxLineBytes));
        pending_.erase(0, kMaxLineBytes);
      }
      return;
    }
    if (pending_.empty()) {
      EmitLine(bytes.substr(0, newline));
    } else {
      pending_.append(bytes.substr(0, newline));
      EmitLine(pending_);
      pending_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
}

void TaggedStream::Flush() {
  if (pending_.empty()) return;
  EmitLine(pending_);
  pending_.clear();
}

void TaggedStream::EmitLine(std::string_view line) {
  std::string out;
  out.reserve(prefix_.size() + line.size() + 1);
  out += prefix_;
  out += line;
  out += '\n';
  WriteAllOrDrop(out_fd_, out);
}

}  // namespace choir::cli
