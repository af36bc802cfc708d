// Line numbers of the position-recording JSON parser, including the cases
// where the lexer reads one character past a value (numbers at the end of a
// line) and malformed input.
#include "topology/json_lines.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace choir::topology {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

JsonValue ParseOk(const std::string& text) {
  Result<JsonValue> r = ParseJsonWithLines(text, "t.json", Code::kBadTopologyFile);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : JsonValue{};
}

TEST(JsonLinesTest, EveryValueKnowsItsLine) {
  const JsonValue root = ParseOk(
      "{\n"                        // 1
      "  \"a\": 5,\n"              // 2
      "  \"b\": [\n"               // 3
      "    1,\n"                   // 4
      "    -2\n"                   // 5: number followed directly by a newline
      "  ],\n"                     // 6
      "  \"c\": {\"d\": true},\n"  // 7
      "\n"                         // 8
      "  \"e\":\n"                 // 9: key and value on different lines
      "    \"text\",\n"            // 10
      "  \"f\": 1.5\n"             // 11
      "}\n");                      // 12
  ASSERT_EQ(root.kind, JsonValue::Kind::kObject);
  EXPECT_EQ(root.line, 1);
  ASSERT_EQ(root.members.size(), 5u);
  EXPECT_EQ(root.members[0].key, "a");
  EXPECT_EQ(root.members[0].key_line, 2);
  EXPECT_EQ(root.members[0].value.line, 2);
  EXPECT_EQ(root.members[0].value.non_negative, 5u);
  const JsonValue& b = root.members[1].value;
  EXPECT_EQ(b.line, 3);
  ASSERT_EQ(b.items.size(), 2u);
  EXPECT_EQ(b.items[0].line, 4);
  EXPECT_EQ(b.items[1].line, 5);
  EXPECT_EQ(b.items[1].kind, JsonValue::Kind::kInteger);
  EXPECT_EQ(b.items[1].integer, -2);
  EXPECT_EQ(root.members[2].value.members[0].value.line, 7);
  EXPECT_EQ(root.members[3].key_line, 9);
  EXPECT_EQ(root.members[3].value.line, 10);
  EXPECT_EQ(root.members[4].value.line, 11);
  EXPECT_EQ(root.members[4].value.kind, JsonValue::Kind::kFloat);
}

TEST(JsonLinesTest, NumberAtEndOfFileAndCrLf) {
  EXPECT_EQ(ParseOk("\n\n42").line, 3);
  const JsonValue root = ParseOk("{\r\n\"a\": 1\r\n,\r\n\"b\": 2}");
  EXPECT_EQ(root.members[0].value.line, 2);
  EXPECT_EQ(root.members[1].value.line, 4);
}

TEST(JsonLinesTest, DuplicateKeysAreKeptInOrder) {
  const JsonValue root = ParseOk("{\"a\": 1,\n \"a\": 2}");
  ASSERT_EQ(root.members.size(), 2u);
  EXPECT_EQ(root.members[1].key_line, 2);
}

TEST(JsonLinesTest, MalformedJsonGivesLineAndColumn) {
  Result<JsonValue> r =
      ParseJsonWithLines("{\n  \"a\": 1,\n  \"b\" 2\n}", "t.json", Code::kBadTopologyFile);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kBadTopologyFile);
  // The parser stops at the '2' where it expected ':'.
  EXPECT_THAT(r.status().message(), StartsWith("t.json:3:7: malformed JSON: "));
  EXPECT_THAT(r.status().message(), HasSubstr("expected ':'"));

  r = ParseJsonWithLines("{\"a\": [1, 2,\n", "t.json", Code::kBadTopologyFile);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), StartsWith("t.json:1:"));
  EXPECT_THAT(r.status().message(), HasSubstr("end of input"));

  r = ParseJsonWithLines("", "t.json", Code::kBadTopologyFile);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("malformed JSON"));

  r = ParseJsonWithLines("{} {}", "t.json", Code::kBadTopologyFile);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), StartsWith("t.json:1:4: malformed JSON"));

  r = ParseJsonWithLines("{\"a\": \"\xff\"}", "t.json", Code::kBadTopologyFile);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("malformed JSON"));
}

TEST(JsonLinesTest, DeepNestingIsRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Result<JsonValue> r = ParseJsonWithLines(deep, "t.json", Code::kBadTopologyFile);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("nesting deeper than 64"));
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJsonWithLines(ok, "t.json", Code::kBadTopologyFile).ok());
}

}  // namespace
}  // namespace choir::topology
