// Rendezvous key-value stores.
//
// Ranks meet through a Store before they can talk to each other: each rank
// publishes its address and identity, waits for the others' and reads them.
// choir ships four: an in-memory store (ranks that are threads of one
// process), a file store (a shared directory), a TCP store (a server hosted by
// `choir run` or by rank 0, with a handshake carrying protocol version, job id
// and rank) and a prefix wrapper that gives each communicator its own key space.
//
// Keys and values are arbitrary bytes held in std::string. Get() does not
// block; Wait() blocks until every key exists or the timeout expires, and then
// names the keys that are still missing. Every store enforces the same limits
// (InvalidArgument beyond them): keys up to 4 KiB, values up to 64 MiB, up to
// 65536 keys per Wait/Check.
//
// Thread-safety: every Store implementation may be used from many threads at once.
#ifndef CHOIR_STORE_H_
#define CHOIR_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "choir/status.h"

namespace choir {

class Store {
 public:
  virtual ~Store() = default;

  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // KeyNotFound when the key does not exist (does not wait).
  virtual Result<std::string> Get(const std::string& key) = 0;
  // Atomically adds `delta` to the integer stored at `key` (missing = 0) and
  // returns the new value. The value is stored as decimal text.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // If the key's current value equals `expected` (or the key is missing and
  // `expected` is empty), stores `desired`. Returns the value after the call
  // ("" when the key is still missing).
  virtual Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                         const std::string& desired) = 0;
  // Returns whether the key existed.
  virtual Result<bool> Delete(const std::string& key) = 0;
  // Blocks until every key exists. StoreTimeout names the missing keys.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Non-blocking: true when every key exists.
  virtual Result<bool> Check(const std::vector<std::string>& keys) = 0;

  // Wait() then Get().
  Result<std::string> WaitGet(const std::string& key, std::chrono::milliseconds timeout);
};

// In-memory store shared by everything holding the pointer (threads of one process).
std::shared_ptr<Store> NewMemoryStore();

// Store kept in a directory (one file per key), usable by processes that share
// the directory. The directory is created if missing.
Result<std::shared_ptr<Store>> NewFileStore(const std::string& directory);

// Every key is prefixed with `prefix` + "/" before it reaches `base`.
std::shared_ptr<Store> NewPrefixStore(const std::string& prefix, std::shared_ptr<Store> base);

struct TcpStoreServerOptions {
  std::string host = "0.0.0.0";  // address to bind
  int port = 0;                  // 0: any free port (read it back with port())
  std::string job_id = "choir";  // clients of another job are refused (JobMismatch)
};

// A TCP store server running on its own thread until Stop() or destruction.
class TcpStoreServer {
 public:
  static Result<std::unique_ptr<TcpStoreServer>> Start(const TcpStoreServerOptions& options);
  virtual ~TcpStoreServer() = default;
  virtual int port() const = 0;
  virtual void Stop() = 0;
  // Number of clients currently connected.
  virtual int num_clients() const = 0;
};

struct TcpStoreClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string job_id = "choir";
  int rank = -1;  // shown in server logs and errors
  // Deadline for connecting (retrying while the server is not up yet) and for
  // each request that is not a Wait.
  std::chrono::milliseconds timeout{30000};
};

// One connection, one request at a time: while a Wait is outstanding, other
// threads using the same client queue behind it (use a second client to Set
// while waiting). A refused handshake reports the server's code (JobMismatch,
// VersionMismatch); a server that cannot be reached gives StoreUnreachable, one
// that never answers the handshake ConnectTimeout, one that stops answering
// later StoreTimeout, one that goes away PeerLost. After such a
// connection failure the client does not reconnect (a retried Add could apply
// twice): later calls fail at once with StoreUnreachable. Protocol:
// docs/protocols.md, "Rendezvous store protocol".
Result<std::shared_ptr<Store>> ConnectTcpStore(const TcpStoreClientOptions& options);

}  // namespace choir

#endif  // CHOIR_STORE_H_
