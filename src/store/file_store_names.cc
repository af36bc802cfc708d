#include "store/file_store_names.h"

#include <fmt/format.h>

#include <cstdint>

#include "base/hash.h"

namespace choir::store {
namespace {

bool KeptAsIs(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

// Two unrelated 64-bit hashes (FNV-1a and a multiplicative polynomial), so a
// collision needs both to collide at once.
std::string Hash128Hex(std::string_view data) {
  uint64_t fnv = 0xcbf29ce484222325ULL;
  uint64_t poly = 0x243f6a8885a308d3ULL ^ data.size();
  for (const char ch : data) {
    const auto c = static_cast<unsigned char>(ch);
    fnv = (fnv ^ c) * 0x100000001b3ULL;
    poly = (poly + c + 1) * 0x9e3779b97f4a7c15ULL;
  }
  return fmt::format("{:016x}{:016x}", Mix64(fnv), Mix64(poly ^ (poly >> 29)));
}

}  // namespace

std::string FileNameForKey(std::string_view key) {
  std::string escaped;
  escaped.reserve(key.size());
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    if (KeptAsIs(c)) {
      escaped += ch;
    } else {
      escaped += fmt::format("%{:02X}", c);
    }
  }
  if (escaped.size() + 2 <= kMaxFileNameBytes) return "k." + escaped;
  // 2 + 128 + 1 + 32 = 163 bytes. The head only helps a human reading the directory.
  return "h." + escaped.substr(0, 128) + "." + Hash128Hex(key);
}

}  // namespace choir::store
