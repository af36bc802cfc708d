// Small string helpers shared by parsers (settings, flags, topology files).
//
// Thread-safety: pure functions.
#ifndef CHOIR_BASE_STRINGS_H_
#define CHOIR_BASE_STRINGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace choir::strings {

std::string ToLower(std::string_view s);
std::string_view Trim(std::string_view s);
// Splits on `sep`; empty pieces are kept ("a,,b" -> {"a", "", "b"}).
std::vector<std::string> Split(std::string_view s, char sep);
bool StartsWith(std::string_view s, std::string_view prefix);

// Strict integer parse: the whole string must be a number in range.
std::optional<int64_t> ParseInt(std::string_view s);
std::optional<double> ParseDouble(std::string_view s);
// "1", "true", "yes", "on" / "0", "false", "no", "off".
std::optional<bool> ParseBool(std::string_view s);
// Byte counts with optional binary suffix: "64", "4K", "16M", "2G", "1KiB", "8MB".
std::optional<uint64_t> ParseBytes(std::string_view s);
// Durations: "30" (seconds), "250ms", "10s", "5m", "1h", "1.5s".
std::optional<double> ParseSeconds(std::string_view s);

// "64 MiB", "8 B", "1.5 KiB".
std::string FormatBytes(uint64_t bytes);

// The value of `key` ("MemTotal") in bytes in /proc/meminfo-style `text`
// ("MemTotal:  24576000 kB"; per-NUMA-node files prefix "Node 0 "), or
// nullopt when it is not there.
std::optional<double> MeminfoBytes(std::string_view text, std::string_view key);

// "0,2,5-9" for {0, 2, 5, 6, 7, 8, 9}: runs of consecutive numbers as
// ranges, so that thousands of ranks make one short line.
std::string FormatRanks(const std::vector<int>& ranks);

// Levenshtein distance (insertions, deletions, substitutions): how far a
// misspelt name is from a known one, for "did you mean" hints.
size_t EditDistance(std::string_view a, std::string_view b);
// FNV-1a, 64 bits; stable across builds and machines (wire and file names).
uint64_t HashString(std::string_view s);

}  // namespace choir::strings

#endif  // CHOIR_BASE_STRINGS_H_
