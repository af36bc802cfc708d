// The file store: one file per key in a shared directory.
//
// Readers need no lock because every write goes to a temporary file that is
// then renamed over the key's file (rename is atomic, so a reader sees the old
// or the new value, never half of one). Writers serialize on flock() of
// "<dir>/.lock", opened anew by each operation: flock excludes other open file
// descriptions, so this works across threads, across processes and after fork.
//
// File names: "k." + the key with every byte outside [A-Za-z0-9_-] written as
// %XX. Escaped names never contain '.', so they cannot be "." or "..", cannot
// contain '/', and cannot collide with the ".lock" and ".tmp.*" files. Keys
// whose escaped form would exceed the file-name limit of common file systems
// become "h." + an escaped head + "." + a 128-bit hash of the whole key.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <thread>

#include "base/clock.h"
#include "base/fd.h"
#include "choir/store.h"
#include "store/file_store_names.h"
#include "store/store_internal.h"

namespace choir {
namespace {

Status IoError(int err, const std::string& what) { return ErrnoError(Code::kStoreIo, err, what); }

class FileStore final : public Store {
 public:
  explicit FileStore(std::string directory) : dir_(std::move(directory)) {}

  Status Set(const std::string& key, const std::string& value) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    CHOIR_RETURN_IF_ERROR(store::ValidateValue(key, value));
    CHOIR_ASSIGN_OR_RETURN(Fd lock, Lock());
    return WriteAtomic(PathFor(key), value);
  }

  Result<std::string> Get(const std::string& key) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    CHOIR_ASSIGN_OR_RETURN(std::optional<std::string> value, ReadIfExists(PathFor(key)));
    if (!value) {
      return Status(Code::kKeyNotFound,
                    "store key " + store::QuoteKey(key) + " does not exist in file store " + dir_);
    }
    return std::move(*value);
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    const std::string path = PathFor(key);
    CHOIR_ASSIGN_OR_RETURN(Fd lock, Lock());
    CHOIR_ASSIGN_OR_RETURN(std::optional<std::string> current, ReadIfExists(path));
    CHOIR_ASSIGN_OR_RETURN(const int64_t sum,
                           store::AddToValue(key, current ? &*current : nullptr, delta));
    CHOIR_RETURN_IF_ERROR(WriteAtomic(path, std::to_string(sum)));
    return sum;
  }

  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateCompareSet(key, expected, desired));
    const std::string path = PathFor(key);
    CHOIR_ASSIGN_OR_RETURN(Fd lock, Lock());
    CHOIR_ASSIGN_OR_RETURN(std::optional<std::string> current, ReadIfExists(path));
    const bool matches = current ? *current == expected : expected.empty();
    if (!matches) return current ? std::move(*current) : std::string();
    CHOIR_RETURN_IF_ERROR(WriteAtomic(path, desired));
    return desired;
  }

  Result<bool> Delete(const std::string& key) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    const std::string path = PathFor(key);
    CHOIR_ASSIGN_OR_RETURN(Fd lock, Lock());
    if (unlink(path.c_str()) == 0) return true;
    if (errno == ENOENT) return false;
    return IoError(errno, "unlink(" + path + ")");
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKeys(keys));
    timeout = store::NonNegative(timeout);
    const Deadline deadline = timeout >= store::kForever
                                  ? Deadline::Infinite()
                                  : Deadline::AtNanos(NowNanos() + timeout.count() * 1000000);
    // Polling: a file system gives no portable change notification (inotify
    // does not see writes made by other hosts of a shared file system).
    int sleep_ms = 1;
    while (true) {
      CHOIR_ASSIGN_OR_RETURN(std::vector<std::string> missing, Missing(keys));
      if (missing.empty()) return Status::Ok();
      if (deadline.Expired()) {
        return store::MissingKeysError(missing, keys.size(), timeout)
            .WithContext("file store " + dir_);
      }
      const int64_t left_ms = (deadline.RemainingNanos() + 999999) / 1000000;
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(sleep_ms, left_ms)));
      sleep_ms = std::min(sleep_ms * 2, 20);
    }
  }

  Result<bool> Check(const std::vector<std::string>& keys) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKeys(keys));
    CHOIR_ASSIGN_OR_RETURN(std::vector<std::string> missing, Missing(keys));
    return missing.empty();
  }

  // Creates the lock file: proves early that the directory is usable.
  Status Probe() {
    CHOIR_ASSIGN_OR_RETURN(Fd lock, Lock());
    return Status::Ok();
  }

 private:
  std::string PathFor(const std::string& key) const {
    return dir_ + "/" + store::FileNameForKey(key);
  }

  // The returned fd holds the exclusive lock until it is closed.
  Result<Fd> Lock() const {
    const std::string path = dir_ + "/.lock";
    Fd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666));
    if (!fd.valid()) return IoError(errno, "open(" + path + ")");
    while (flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return IoError(errno, "flock(" + path + ")");
    }
    return fd;
  }

  Status WriteAtomic(const std::string& path, const std::string& value) const {
    std::string tmp = dir_ + "/.tmp.XXXXXX";
    Fd fd(mkostemp(tmp.data(), O_CLOEXEC));
    if (!fd.valid()) return IoError(errno, "mkstemp(" + tmp + ")");
    Status status = WriteAll(fd.get(), tmp, value);
    // mkstemp creates 0600; other users of a shared directory may need to read.
    if (status.ok() && fchmod(fd.get(), 0644) != 0) status = IoError(errno, "fchmod(" + tmp + ")");
    if (status.ok() && close(fd.Release()) != 0) status = IoError(errno, "close(" + tmp + ")");
    if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
      status = IoError(errno, "rename(" + tmp + ", " + path + ")");
    }
    if (!status.ok()) unlink(tmp.c_str());
    return status;
  }

  static Status WriteAll(int fd, const std::string& path, const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return IoError(errno, "write(" + path + ")");
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  static Result<std::optional<std::string>> ReadIfExists(const std::string& path) {
    Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
      if (errno == ENOENT) return std::optional<std::string>();
      return IoError(errno, "open(" + path + ")");
    }
    std::string out;
    char buf[65536];
    while (true) {
      const ssize_t n = read(fd.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return IoError(errno, "read(" + path + ")");
      if (n == 0) break;
      // Files are written by us, but the directory is shared: do not let a
      // foreign giant file exhaust memory.
      if (out.size() + static_cast<size_t>(n) > store::kMaxValueBytes) {
        return Status(Code::kStoreIo, fmt::format("{} is larger than the store value limit of {} "
                                                  "bytes; it was not written by choir",
                                                  path, store::kMaxValueBytes));
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return std::optional<std::string>(std::move(out));
  }

  Result<std::vector<std::string>> Missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      const std::string path = PathFor(key);
      struct stat st;
      if (stat(path.c_str(), &st) == 0) continue;
      if (errno != ENOENT) return IoError(errno, "stat(" + path + ")");
      missing.push_back(key);
    }
    return missing;
  }

  const std::string dir_;
};

}  // namespace

Result<std::shared_ptr<Store>> NewFileStore(const std::string& directory) {
  if (directory.empty()) return InvalidArgument("file store directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    return Status(Code::kStoreIo,
                  "cannot create file store directory " + directory + ": " + ec.message());
  }
  auto store = std::make_shared<FileStore>(directory);
  CHOIR_RETURN_IF_ERROR(store->Probe());
  return std::shared_ptr<Store>(std::move(store));
}

}  // namespace choir
