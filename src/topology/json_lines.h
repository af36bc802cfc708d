// A JSON document that remembers the line of every value, for error messages
// that point into a hand-written file ("topo.json:12: hosts[1].ranks[3]: ...").
//
// nlohmann-json's DOM forgets positions, so ParseJsonWithLines drives its SAX
// parser over an iterator that counts newlines and builds this small tree
// instead. Unlike the DOM it keeps duplicate object keys (the caller rejects
// them) and members in file order.
//
// Thread-safety: pure functions and plain values.
#ifndef CHOIR_TOPOLOGY_JSON_LINES_H_
#define CHOIR_TOPOLOGY_JSON_LINES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "choir/status.h"

namespace choir::topology {

struct JsonMember;

struct JsonValue {
  enum class Kind { kNull, kBool, kInteger, kUnsigned, kFloat, kString, kArray, kObject };

  Kind kind = Kind::kNull;
  int line = 0;  // 1-based line of the value (its opening bracket for containers)
  bool boolean = false;
  int64_t integer = 0;              // kInteger (negative integers)
  uint64_t non_negative = 0;        // kUnsigned
  double number = 0;                // kFloat
  std::string text;                 // kString
  std::vector<JsonValue> items;     // kArray
  std::vector<JsonMember> members;  // kObject, in file order, duplicates kept

  bool IsInteger() const { return kind == Kind::kInteger || kind == Kind::kUnsigned; }
  bool IsNumber() const { return IsInteger() || kind == Kind::kFloat; }
  // The numeric value as a double (0 for non-numbers).
  double AsDouble() const;
  // "an object", "a string", "the number 1.5"...: for "must be X, not Y" messages.
  std::string Describe() const;
};

struct JsonMember {
  std::string key;
  int key_line = 0;
  JsonValue value;
};

// Deepest nesting accepted; deeper input is rejected instead of exhausting the stack.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`. Malformed JSON gives Status `error_code` with the message
// "<origin>:<line>:<column>: malformed JSON: <what the parser expected>".
Result<JsonValue> ParseJsonWithLines(const std::string& text, const std::string& origin,
                                     Code error_code);

}  // namespace choir::topology

#endif  // CHOIR_TOPOLOGY_JSON_LINES_H_
