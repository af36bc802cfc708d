#include "diag/prom_text.h"

#include <gtest/gtest.h>

#include <limits>

namespace choir::diag {
namespace {

TEST(PromTextTest, FormatsAndEscapes) {
  EXPECT_EQ(FormatSample("a_total", {}, 3), "a_total 3");
  EXPECT_EQ(FormatSample("t", {{"k", "x\"y\\z\nw"}}, 1.5), "t{k=\"x\\\"y\\\\z\\nw\"} 1.5");
  EXPECT_EQ(FormatSample("n", {{"a", "1"}, {"b", "2"}}, std::numeric_limits<double>::infinity()),
            "n{a=\"1\",b=\"2\"} +Inf");
}

TEST(PromTextTest, ParsesFamiliesAndHistogramSamples) {
  const std::string text =
      "# HELP h_seconds Durations.\n# TYPE h_seconds histogram\n"
      "h_seconds_bucket{le=\"1\"} 2\nh_seconds_bucket{le=\"+Inf\"} 3\nh_seconds_sum "
      "4.5\nh_seconds_count 3\n"
      "# TYPE c_total counter\nc_total{op=\"a,b\",x=\"}\"} 7 1700000000\n\nloose 1\n";
  auto families = ParsePrometheusText(text);
  ASSERT_TRUE(families.ok()) << families.status().ToString();
  ASSERT_EQ(families->size(), 3u);
  EXPECT_EQ((*families)[0].name, "h_seconds");
  EXPECT_EQ((*families)[0].type, "histogram");
  EXPECT_EQ((*families)[0].help, "Durations.");
  EXPECT_EQ((*families)[0].samples.size(), 4u);
  EXPECT_EQ((*families)[1].samples.size(), 1u);
  EXPECT_EQ((*families)[2].name, "loose");
  EXPECT_EQ((*families)[2].type, "untyped");
}

TEST(PromTextTest, RejectsCutOffAndMalformedDocuments) {
  EXPECT_FALSE(ParsePrometheusText("a 1\nb 2").ok());        // no final newline
  EXPECT_FALSE(ParsePrometheusText("a{x=\"1\" 1\n").ok());   // unterminated labels
  EXPECT_FALSE(ParsePrometheusText("a{x=\"1} 1\n").ok());    // unterminated value
  EXPECT_FALSE(ParsePrometheusText("a onehundred\n").ok());  // not a number
  EXPECT_FALSE(ParsePrometheusText("9a 1\n").ok());          // bad name
  EXPECT_FALSE(ParsePrometheusText("<html>\n").ok());
  EXPECT_TRUE(ParsePrometheusText("").ok());
  EXPECT_TRUE(ParsePrometheusText("# just a comment\n").ok());
}

TEST(PromTextTest, MergesFamiliesFromSeveralSources) {
  const std::string a = "# HELP x_total X.\n# TYPE x_total counter\nx_total{rank=\"0\"} 1\n";
  const std::string b = "# HELP x_total X.\n# TYPE x_total counter\nx_total{rank=\"1\"} 2\n";
  const std::string conflicting = "# TYPE x_total gauge\nx_total{rank=\"2\"} 3\n";
  FamilySet set;
  set.AddAll(*ParsePrometheusText(a));
  set.AddAll(*ParsePrometheusText(b));
  EXPECT_FALSE(set.Add((*ParsePrometheusText(conflicting))[0]));
  EXPECT_EQ(
      set.Render(),
      "# HELP x_total X.\n# TYPE x_total counter\nx_total{rank=\"0\"} 1\nx_total{rank=\"1\"} 2\n");
}

}  // namespace
}  // namespace choir::diag
