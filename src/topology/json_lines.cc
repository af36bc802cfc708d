// Line-aware JSON parsing: nlohmann's SAX parser over a newline-counting
// iterator. Tokens never span lines (raw newlines are invalid inside JSON
// strings), so the line of the last character the lexer consumed is the line
// of the token a SAX callback reports. The one look-ahead the lexer takes
// after a number is either on the same line or is the newline ending it,
// which still counts as that line.
#include "topology/json_lines.h"

#include <fmt/format.h>

#include <cstddef>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

namespace choir::topology {
namespace {

using json = nlohmann::json;

// Line and column of the last character read.
struct ReadPosition {
  int line = 1;
  int column = 0;
  bool last_was_newline = false;

  void Consume(char c) {
    if (last_was_newline) {
      ++line;
      column = 0;
    }
    ++column;
    last_was_newline = c == '\n';
  }
};

// A character iterator that reports every character it steps over to a
// ReadPosition. nlohmann's iterator adapter dereferences and advances each
// character exactly once, and does not read ahead into a buffer.
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* at, ReadPosition* position) : at_(at), position_(position) {}

  reference operator*() const { return *at_; }
  CountingIterator& operator++() {
    position_->Consume(*at_);
    ++at_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  friend bool operator==(const CountingIterator& a, const CountingIterator& b) {
    return a.at_ == b.at_;
  }

 private:
  const char* at_;
  ReadPosition* position_;
};

// Builds a JsonValue tree from SAX events. Open containers live on a stack
// by value and move into their parent when they close, so no pointer into a
// growing vector is ever held.
class TreeBuilder : public nlohmann::json_sax<json> {
 public:
  TreeBuilder(std::string_view text, const ReadPosition* position)
      : text_(text), position_(position) {}

  bool null() override { return Add(Leaf(JsonValue::Kind::kNull)); }
  bool boolean(bool value) override {
    JsonValue v = Leaf(JsonValue::Kind::kBool);
    v.boolean = value;
    return Add(std::move(v));
  }
  bool number_integer(number_integer_t value) override {
    JsonValue v = Leaf(JsonValue::Kind::kInteger);
    v.integer = value;
    return Add(std::move(v));
  }
  bool number_unsigned(number_unsigned_t value) override {
    JsonValue v = Leaf(JsonValue::Kind::kUnsigned);
    v.non_negative = value;
    return Add(std::move(v));
  }
  bool number_float(number_float_t value, const string_t&) override {
    JsonValue v = Leaf(JsonValue::Kind::kFloat);
    v.number = value;
    return Add(std::move(v));
  }
  bool string(string_t& value) override {
    JsonValue v = Leaf(JsonValue::Kind::kString);
    v.text = std::move(value);
    return Add(std::move(v));
  }
  bool binary(binary_t&) override { return Fail("binary values are not JSON"); }
  bool start_object(std::size_t) override { return Open(JsonValue::Kind::kObject); }
  bool key(string_t& value) override {
    open_.back().pending_key = std::move(value);
    open_.back().pending_key_line = position_->line;
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(JsonValue::Kind::kArray); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: <what>" or
    // "[json.exception.out_of_range.406] <what>": keep <what>.
    std::string what = ex.what();
    if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos) {
      what = what.substr(what.find("] ") + 2);
    }
    if (what.rfind("parse error", 0) == 0 && what.find(": ") != std::string::npos) {
      what = what.substr(what.find(": ") + 2);
    }
    // `position` counts the characters the lexer used, without the look-ahead
    // it put back after a number; our own count includes it.
    const bool ok = Fail(std::move(what));
    SetErrorPosition(position);
    return ok;
  }

  JsonValue TakeRoot() { return std::move(root_); }
  const std::string& error() const { return error_; }
  int error_line() const { return error_line_; }
  int error_column() const { return error_column_; }

 private:
  struct OpenContainer {
    JsonValue value;
    std::string pending_key;
    int pending_key_line = 0;
  };

  JsonValue Leaf(JsonValue::Kind kind) const {
    JsonValue v;
    v.kind = kind;
    v.line = position_->line;
    return v;
  }

  bool Add(JsonValue v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return true;
    }
    OpenContainer& parent = open_.back();
    if (parent.value.kind == JsonValue::Kind::kArray) {
      parent.value.items.push_back(std::move(v));
    } else {
      parent.value.members.push_back(
          JsonMember{std::move(parent.pending_key), parent.pending_key_line, std::move(v)});
      parent.pending_key.clear();
    }
    return true;
  }

  bool Open(JsonValue::Kind kind) {
    if (static_cast<int>(open_.size()) >= kMaxJsonDepth) {
      return Fail(fmt::format("nesting deeper than {} levels", kMaxJsonDepth));
    }
    open_.push_back(OpenContainer{Leaf(kind), "", 0});
    return true;
  }

  bool Close() {
    JsonValue done = std::move(open_.back().value);
    open_.pop_back();
    return Add(std::move(done));
  }

  // Line and column of the `position`-th character of the text (1-based).
  void SetErrorPosition(std::size_t position) {
    if (position == 0 || position > text_.size()) return;
    error_line_ = 1;
    error_column_ = 0;
    for (size_t i = 0; i + 1 < position; ++i) {
      if (text_[i] == '\n') {
        ++error_line_;
        error_column_ = 0;
      } else {
        ++error_column_;
      }
    }
    ++error_column_;
  }

  bool Fail(std::string what) {
    error_ = std::move(what);
    error_line_ = position_->line;
    error_column_ = position_->column;
    return false;
  }

  std::string_view text_;
  const ReadPosition* position_;
  std::vector<OpenContainer> open_;
  JsonValue root_;
  std::string error_;
  int error_line_ = 0;
  int error_column_ = 0;
};

}  // namespace

double JsonValue::AsDouble() const {
  switch (kind) {
    case Kind::kInteger:
      return static_cast<double>(integer);
    case Kind::kUnsigned:
      return static_cast<double>(non_negative);
    case Kind::kFloat:
      return number;
    default:
      return 0;
  }
}

std::string JsonValue::Describe() const {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return boolean ? "true" : "false";
    case Kind::kInteger:
      return fmt::format("the number {}", integer);
    case Kind::kUnsigned:
      return fmt::format("the number {}", non_negative);
    case Kind::kFloat:
      return fmt::format("the number {}", number);
    case Kind::kString:
      return "a string";
    case Kind::kArray:
      return "an array";
    case Kind::kObject:
      return "an object";
  }
  return "a value";
}

Result<JsonValue> ParseJsonWithLines(const std::string& text, const std::string& origin,
                                     Code error_code) {
  ReadPosition position;
  TreeBuilder builder(text, &position);
  bool ok = false;
  try {
    ok = json::sax_parse(CountingIterator(text.data(), &position),
                         CountingIterator(text.data() + text.size(), &position), &builder);
  } catch (const std::exception& e) {
    // The SAX path reports errors through parse_error(); this is a safety net.
    return Status(error_code, fmt::format("{}:{}:{}: malformed JSON: {}", origin, position.line,
                                          position.column, e.what()));
  }
  if (!ok) {
    const std::string what = builder.error().empty() ? "parse failed" : builder.error();
    return Status(error_code, fmt::format("{}:{}:{}: malformed JSON: {}", origin,
                                          builder.error_line(), builder.error_column(), what));
  }
  return builder.TakeRoot();
}

}  // namespace choir::topology
