#include "store/store_internal.h"

#include <fmt/format.h>

#include "base/strings.h"

namespace choir::store {
namespace {

constexpr size_t kMaxQuotedKeyBytes = 120;
constexpr size_t kMaxNamedMissingKeys = 20;

}  // namespace

Status ValidateKey(const std::string& key) {
  if (key.size() > kMaxKeyBytes) {
    return InvalidArgument(fmt::format("store key {} is {} bytes; the limit is {} bytes",
                                       QuoteKey(key), key.size(), kMaxKeyBytes));
  }
  return Status::Ok();
}

Status ValidateValue(const std::string& key, const std::string& value) {
  if (value.size() > kMaxValueBytes) {
    return InvalidArgument(fmt::format("value for store key {} is {}; the limit is {}",
                                       QuoteKey(key), strings::FormatBytes(value.size()),
                                       strings::FormatBytes(kMaxValueBytes)));
  }
  return Status::Ok();
}

Status ValidateKeys(const std::vector<std::string>& keys) {
  if (keys.size() > kMaxKeysPerCall) {
    return InvalidArgument(
        fmt::format("{} keys in one store call; the limit is {}", keys.size(), kMaxKeysPerCall));
  }
  size_t total = 0;
  for (const std::string& key : keys) {
    CHOIR_RETURN_IF_ERROR(ValidateKey(key));
    total += key.size();
  }
  if (total > kMaxKeyListBytes) {
    return InvalidArgument(fmt::format("the keys of one store call add up to {}; the limit is {}",
                                       strings::FormatBytes(total),
                                       strings::FormatBytes(kMaxKeyListBytes)));
  }
  return Status::Ok();
}

Status ValidateCompareSet(const std::string& key, const std::string& expected,
                          const std::string& desired) {
  CHOIR_RETURN_IF_ERROR(ValidateKey(key));
  if (expected.size() + desired.size() > kMaxValueBytes) {
    return InvalidArgument(fmt::format(
        "CompareSet on store key {}: expected and desired values add up to {}; the limit is {}",
        QuoteKey(key), strings::FormatBytes(expected.size() + desired.size()),
        strings::FormatBytes(kMaxValueBytes)));
  }
  return Status::Ok();
}

std::string QuoteKey(std::string_view key) {
  std::string out = "'";
  const size_t shown = std::min(key.size(), kMaxQuotedKeyBytes);
  for (size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  out += "'";
  if (shown < key.size()) out += fmt::format("... ({} bytes)", key.size());
  return out;
}

Status MissingKeysError(const std::vector<std::string>& missing, size_t num_keys,
                        std::chrono::milliseconds timeout) {
  std::string names;
  for (size_t i = 0; i < missing.size() && i < kMaxNamedMissingKeys; ++i) {
    if (i > 0) names += ", ";
    names += QuoteKey(missing[i]);
  }
  if (missing.size() > kMaxNamedMissingKeys) {
    names += fmt::format(" and {} more", missing.size() - kMaxNamedMissingKeys);
  }
  return Status(Code::kStoreTimeout,
                fmt::format("waited {} ms for {} store key(s); {} still missing: {}",
                            timeout.count(), num_keys, missing.size(), names));
}

Result<int64_t> AddToValue(const std::string& key, const std::string* current, int64_t delta) {
  int64_t value = 0;
  if (current != nullptr) {
    const auto parsed = strings::ParseInt(*current);
    if (!parsed) {
      return InvalidArgument(
          fmt::format("Add on store key {}: its value {} is not a decimal integer", QuoteKey(key),
                      QuoteKey(*current)));
    }
    value = *parsed;
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    return InvalidArgument(
        fmt::format("Add on store key {}: {} + {} overflows int64", QuoteKey(key), value, delta));
  }
  return sum;
}

const std::string* KeyTable::Find(const std::string& key) const {
  const auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

Result<int64_t> KeyTable::Add(const std::string& key, int64_t delta) {
  CHOIR_ASSIGN_OR_RETURN(const int64_t sum, AddToValue(key, Find(key), delta));
  map_[key] = std::to_string(sum);
  return sum;
}

std::string KeyTable::CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) {
  const auto it = map_.find(key);
  if (it == map_.end()) {
    if (!expected.empty()) return std::string();
    map_.emplace(key, desired);
    return desired;
  }
  if (it->second == expected) it->second = desired;
  return it->second;
}

std::vector<std::string> KeyTable::Missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (map_.find(key) == map_.end()) missing.push_back(key);
  }
  return missing;
}

}  // namespace choir::store
