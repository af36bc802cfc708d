// Limits, error messages and the key table shared by the store implementations.
//
// The limits apply to every store (not only TCP) so that a program that works
// with the memory store in tests does not fail later against the TCP store.
//
// Thread-safety: free functions are pure; KeyTable is not synchronized (the
// memory store guards it with its mutex, the TCP server owns it on one thread).
#ifndef CHOIR_STORE_STORE_INTERNAL_H_
#define CHOIR_STORE_STORE_INTERNAL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "choir/status.h"

namespace choir::store {

inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;
inline constexpr size_t kMaxKeysPerCall = size_t{1} << 16;
// Sum of the key sizes in one Wait/Check.
inline constexpr size_t kMaxKeyListBytes = size_t{16} << 20;

// InvalidArgument when a key, value or key list is over its limit.
Status ValidateKey(const std::string& key);
Status ValidateValue(const std::string& key, const std::string& value);
Status ValidateKeys(const std::vector<std::string>& keys);
// CompareSet's two values together must fit the value limit, so that one TCP
// frame carries any valid request.
Status ValidateCompareSet(const std::string& key, const std::string& expected,
                          const std::string& desired);

// The key quoted for a message: printable ASCII kept, other bytes as \xNN, long
// keys shortened (keys are arbitrary bytes and may be 4 KiB long).
std::string QuoteKey(std::string_view key);

// The StoreTimeout a Wait returns: names (up to a bound) the keys still missing.
Status MissingKeysError(const std::vector<std::string>& missing, size_t num_keys,
                        std::chrono::milliseconds timeout);

// Add() on a stored value: `current` is the stored text (nullptr: missing = 0).
// InvalidArgument when the text is not a decimal integer or the sum overflows.
Result<int64_t> AddToValue(const std::string& key, const std::string* current, int64_t delta);

// Timeouts at least this long never expire (they would overflow clock arithmetic).
inline constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365 * 100);

// Clamps a caller's timeout to >= 0.
inline std::chrono::milliseconds NonNegative(std::chrono::milliseconds timeout) {
  return timeout.count() < 0 ? std::chrono::milliseconds(0) : timeout;
}

// The key/value map behind the memory store and the TCP server. Arguments are
// assumed validated by the caller.
class KeyTable {
 public:
  void Set(const std::string& key, std::string value) { map_[key] = std::move(value); }
  // nullptr when missing; valid until the next mutation.
  const std::string* Find(const std::string& key) const;
  Result<int64_t> Add(const std::string& key, int64_t delta);
  // Returns the value after the call ("" when the key is still missing).
  std::string CompareSet(const std::string& key, const std::string& expected,
                         const std::string& desired);
  bool Delete(const std::string& key) { return map_.erase(key) > 0; }
  // The keys of `keys` that do not exist, in the order given.
  std::vector<std::string> Missing(const std::vector<std::string>& keys) const;

 private:
  std::unordered_map<std::string, std::string> map_;
};

}  // namespace choir::store

#endif  // CHOIR_STORE_STORE_INTERNAL_H_
