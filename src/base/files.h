// Reading and replacing small files safely: what a tool reads must be a
// regular file of bounded size (a FIFO or /dev/zero named by mistake would
// block or grow memory without end), and what it writes replaces an earlier
// file whole or not at all.
//
// Thread-safety: no shared state.
#ifndef CHOIR_BASE_FILES_H_
#define CHOIR_BASE_FILES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "choir/status.h"

namespace choir::files {

// The contents of `path`, which must be a regular file of at most
// `max_bytes`. InvalidArgument naming what it is otherwise ("is a
// directory", "is not a regular file", "holds N bytes, more than M"),
// SystemError with errno's text when it cannot be opened or read.
Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes);

// The value of `key` ("MemAvailable") in bytes in the meminfo file `path`,
// or 0 when it cannot be read or has no such line.
uint64_t ReadMeminfoBytes(std::string_view key, const std::string& path = "/proc/meminfo");

// Whether ReplaceFile(path, ...) can work, checked before a long run: `path`
// is not a directory, and a regular file (or none yet) can be made beside
// it (made and removed once here); anything else (/dev/null, a pipe) must be
// writable. InvalidArgument naming why not.
Status CheckReplaceable(const std::string& path);

// Writes `text` to `path`. A regular file (or a new one) is written to a
// private file beside it (mkstemp) and renamed over it, with the earlier
// file's mode and, where allowed, owner: a failed write leaves the earlier
// file whole, and a symbolic link keeps pointing to the new file. Where that
// cannot work but the file itself is writable (a directory the user cannot
// write, a file bind-mounted on its own), and for /dev/null, pipes and
// dangling links, the file is written in place. A file the user may not
// write is left alone. SystemError with errno's text on failure.
Status ReplaceFile(const std::string& path, std::string_view text);

}  // namespace choir::files

#endif  // CHOIR_BASE_FILES_H_
