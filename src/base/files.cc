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

// `path` with symbolic links resolved; itself when that fails (no file yet).
std::string Resolved(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (real == nullptr) return path;
  std::string out = real;
  std::free(real);
  return out;
}

// A new, private file beside `target` (mkstemp: an unpredictable name that
// nobody else can have planted). Sets *fd; errno on failure.
std::string MakeTempBeside(const std::string& target, Fd* fd) {
  std::string name = target + ".tmp.XXXXXX";
  fd->Reset(mkostemp(name.data(), O_CLOEXEC));
  return fd->valid() ? name : std::string();
}

// Whether a failure to make or rename a file beside the target calls for
// writing the target in place instead: a directory the user cannot write
// (but the file is writable), a read-only or different filesystem, a file
// bind-mounted on its own (rename gives EBUSY).
bool WriteInPlaceInstead(int err) {
  return err == EACCES || err == EPERM || err == EROFS || err == EBUSY || err == EXDEV;
}

Status WriteAll(int fd, std::string_view text, const std::string& what) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(Code::kSystemError, errno, "writing " + what);
    text.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// Truncates and writes `path` itself (devices, pipes, and files that cannot
// be replaced through a file beside them).
Status WriteInPlace(const std::string& path, std::string_view text) {
  Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644));
  if (!fd.valid()) return ErrnoError(Code::kSystemError, errno, "writing " + path);
  CHOIR_RETURN_IF_ERROR(WriteAll(fd.get(), text, path));
  if (close(fd.Release()) != 0) return ErrnoError(Code::kSystemError, errno, "writing " + path);
  return Status::Ok();
}

}  // namespace

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  // The type first, without opening: opening a device or a FIFO can block or
  // have effects of its own.
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return ErrnoError(Code::kSystemError, errno, "opening " + path);
  if (S_ISDIR(st.st_mode)) return Status(Code::kInvalidArgument, path + " is a directory");
  if (!S_ISREG(st.st_mode)) return Status(Code::kInvalidArgument, path + " is not a regular file");
  // Non-blocking, in case it was swapped for a FIFO meanwhile; checked again below.
  Fd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError(Code::kSystemError, errno, "opening " + path);
  if (fstat(fd.get(), &st) != 0) return ErrnoError(Code::kSystemError, errno, "reading " + path);
  if (!S_ISREG(st.st_mode)) return Status(Code::kInvalidArgument, path + " is not a regular file");
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  // Read to the end rather than trust st_size (stale on some filesystems),
  // but never more than the limit.
  std::string text;
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(Code::kSystemError, errno, "reading " + path);
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      return Status(Code::kInvalidArgument, fmt::format("{} holds more than the {} this reads", path,
                                                        strings::FormatBytes(max_bytes)));
    }
  }
  return text;
}

uint64_t ReadMeminfoBytes(std::string_view key, const std::string& path) {
  const auto text = ReadSmallFile(path, 1 << 20);
  const auto bytes = text.ok() ? strings::MeminfoBytes(*text, key) : std::nullopt;
  return bytes ? static_cast<uint64_t>(*bytes) : 0;
}

Status CheckReplaceable(const std::string& path) {
  const std::string target = Resolved(path);
  struct stat st {};
  const bool exists = stat(target.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) return Status(Code::kInvalidArgument, "is a directory");
  if (exists) {
    if (access(target.c_str(), W_OK) != 0) return Status(Code::kInvalidArgument, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return Status::Ok();
  } else {
    const size_t slash = target.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : target.substr(0, slash));
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status(Code::kInvalidArgument, "directory " + dir + " does not exist");
    }
  }
  Fd fd;
  const std::string probe = MakeTempBeside(target, &fd);
  if (!fd.valid()) {
    const int err = errno;
    // An existing writable file can still be written in place.
    if (exists && WriteInPlaceInstead(err)) return Status::Ok();
    return Status(Code::kInvalidArgument, "cannot create a file beside it: " + std::string(std::strerror(err)));
  }
  unlink(probe.c_str());
  return Status::Ok();
}

Status ReplaceFile(const std::string& path, std::string_view text) {
  const std::string target = Resolved(path);
  struct stat st {};
  const bool exists = stat(target.c_str(), &st) == 0;
  struct stat lst {};
  const bool dangling_link = !exists && lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode);
  if ((exists && !S_ISREG(st.st_mode)) || dangling_link) return WriteInPlace(path, text);
  // A file the user may not write stays as it is, as with a plain write.
  if (exists && access(target.c_str(), W_OK) != 0) return ErrnoError(Code::kSystemError, errno, "writing " + path);
  Fd fd;
  const std::string tmp = MakeTempBeside(target, &fd);
  if (!fd.valid()) {
    const int err = errno;
    if (exists && WriteInPlaceInstead(err)) return WriteInPlace(target, text);
    return ErrnoError(Code::kSystemError, err, "writing a file beside " + path);
  }
  Status wrote = WriteAll(fd.get(), text, path);
  // mkstemp makes it 0600: give it the earlier file's mode, or the usual one.
  if (wrote.ok()) {
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(fd.get(), exists ? (st.st_mode & 07777) : (0666 & ~mask));
    if (exists) (void)fchown(fd.get(), st.st_uid, st.st_gid);  // kept where allowed
  }
  if (close(fd.Release()) != 0 && wrote.ok()) wrote = ErrnoError(Code::kSystemError, errno, "writing " + path);
  if (!wrote.ok()) {
    unlink(tmp.c_str());
    return wrote;
  }
  if (rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    if (exists && WriteInPlaceInstead(err)) return WriteInPlace(target, text);
    return ErrnoError(Code::kSystemError, err, "renaming a file over " + path);
  }
  return Status::Ok();
}

}  // namespace choir::files
