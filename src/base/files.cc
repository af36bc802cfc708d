#include "base/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/fd.h"
#include "base/strings.h"

namespace choir::files {
namespace {

// `path` with symbolic links resolved (itself when that fails).
std::string Resolved(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (real == nullptr) return path;
  std::string out = real;
  std::free(real);
  return out;
}

std::string TempBeside(const std::string& target) { return fmt::format("{}.tmp.{}", target, getpid()); }

}  // namespace

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  // Non-blocking, so that opening a FIFO returns at once (it is then refused).
  Fd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError(Code::kSystemError, errno, "opening " + path);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoError(Code::kSystemError, errno, "reading " + path);
  if (S_ISDIR(st.st_mode)) return Status(Code::kInvalidArgument, path + " is a directory");
  if (!S_ISREG(st.st_mode)) return Status(Code::kInvalidArgument, path + " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return Status(Code::kInvalidArgument, fmt::format("{} holds {}, more than the {} this reads", path,
                                                      strings::FormatBytes(static_cast<uint64_t>(st.st_size)),
                                                      strings::FormatBytes(max_bytes)));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(Code::kSystemError, errno, "reading " + path);
    if (n == 0) break;  // shrank meanwhile
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

Status CheckReplaceable(const std::string& path) {
  const std::string target = Resolved(path);
  struct stat st {};
  if (stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status(Code::kInvalidArgument, "is a directory");
    if (!S_ISREG(st.st_mode)) {
      if (access(target.c_str(), W_OK) == 0) return Status::Ok();
      return Status(Code::kInvalidArgument, std::strerror(errno));
    }
  } else {
    const size_t slash = target.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : target.substr(0, slash));
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status(Code::kInvalidArgument, "directory " + dir + " does not exist");
    }
  }
  const std::string probe = TempBeside(target);
  Fd fd(open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status(Code::kInvalidArgument, "cannot create " + probe + ": " + std::strerror(errno));
  unlink(probe.c_str());
  return Status::Ok();
}

Status ReplaceFile(const std::string& path, std::string_view text) {
  const std::string target = Resolved(path);
  struct stat st {};
  const bool exists = stat(target.c_str(), &st) == 0;
  const bool special = exists && !S_ISREG(st.st_mode);
  const std::string tmp = special ? target : TempBeside(target);
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return ErrnoError(Code::kSystemError, errno, "writing " + tmp);
  errno = 0;
  int err = std::fwrite(text.data(), 1, text.size(), f) == text.size() ? 0 : (errno != 0 ? errno : EIO);
  if (std::fclose(f) != 0 && err == 0) err = errno != 0 ? errno : EIO;
  if (err != 0) {
    if (!special) std::remove(tmp.c_str());
    return ErrnoError(Code::kSystemError, err, "writing " + path);
  }
  if (special) return Status::Ok();
  if (exists) chmod(tmp.c_str(), st.st_mode & 07777);
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    return ErrnoError(Code::kSystemError, err, "renaming " + tmp + " to " + path);
  }
  return Status::Ok();
}

}  // namespace choir::files
