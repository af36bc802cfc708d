// How the file store turns a key (any bytes) into a safe file name. Separate
// from file_store.cc so that tests can check the mapping directly.
//
// Thread-safety: pure functions.
#ifndef CHOIR_STORE_FILE_STORE_NAMES_H_
#define CHOIR_STORE_FILE_STORE_NAMES_H_

#include <string>
#include <string_view>

namespace choir::store {

// Longest file name FileNameForKey returns (well under NAME_MAX = 255).
inline constexpr size_t kMaxFileNameBytes = 200;

// "k.<escaped>" or, for long keys, "h.<escaped head>.<32 hex digits of hash>".
// Distinct keys give distinct names (for hashed names: up to a 128-bit
// non-cryptographic hash collision; whoever can write the directory can
// forge any value anyway).
std::string FileNameForKey(std::string_view key);

}  // namespace choir::store

#endif  // CHOIR_STORE_FILE_STORE_NAMES_H_
