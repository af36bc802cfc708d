// Copies one rank's output stream (stdout or stderr, read from a pipe) to the
// launcher's own stream, prefixing every line with the rank: "[3] loss 0.12".
//
// Lines are written whole with one write() each, so lines of different ranks
// never interleave mid-line. A partial last line is held until its newline
// arrives or the stream ends (Flush). A line longer than kMaxLineBytes is
// split so that a rank printing without newlines cannot grow the buffer
// without bound.
//
// Thread-safety: not thread-safe; the launcher uses it from its event loop.
#ifndef CHOIR_TOOLS_CHOIR_TAGGED_OUTPUT_H_
#define CHOIR_TOOLS_CHOIR_TAGGED_OUTPUT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace choir::cli {

class TaggedStream {
 public:
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  // `out_fd` is where tagged lines go (1 or 2); `prefix` is written before each line.
  TaggedStream(int out_fd, std::string prefix) : out_fd_(out_fd), prefix_(std::move(prefix)) {}

  // Appends bytes read from the rank and writes every complete line.
  void Feed(std::string_view bytes);
  // Writes a pending partial line (with a newline added); call at end of stream.
  void Flush();

 private:
  void EmitLine(std::string_view line);

  int out_fd_;
  std::string prefix_;
  std::string pending_;
};

// Writes all of `data` to `fd`, retrying short writes and EINTR. Output that
// cannot be written (a closed pipe on the reading side) is dropped: the ranks
// must keep running even if nobody reads the launcher's output.
void WriteAllOrDrop(int fd, std::string_view data);

}  // namespace choir::cli

#endif  // CHOIR_TOOLS_CHOIR_TAGGED_OUTPUT_H_
