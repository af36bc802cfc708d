#include "diag/exporter.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "base/socket.h"
#include "choir/metrics.h"
#include "diag/device_metrics.h"
#include "diag/http.h"
#include "diag/metrics_endpoint.h"
#include "diag/registry.h"
#include "params/params.h"
#include "testing/temp_dir.h"

namespace choir::diag {
namespace {

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

RegistryEntry Entry(const std::string& job, int rank, int port) {
  RegistryEntry e;
  e.pid = static_cast<int>(getpid());
  e.job = job;
  e.rank = rank;
  e.size = 2;
  e.address = "127.0.0.1";
  e.port = port;
  return e;
}

TEST(HttpTest, ServesGetsAndReportsPortInUse) {
  auto server = HttpServer::Start("127.0.0.1", 0,
                                  {{"/x",
                                    [] {
                                      return HttpReply{200, "text/plain", "hello\n"};
                                    }}},
                                  1);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto got = HttpGet("127.0.0.1", (*server)->port(), "/x", 2);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->body, "hello\n");
  auto missing = HttpGet("127.0.0.1", (*server)->port(), "/nothing", 2);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  auto taken = HttpServer::Start("127.0.0.1", (*server)->port(), {}, 1);
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), Code::kAddressInUse);
  EXPECT_FALSE(HttpServer::Start("no-such-host.invalid", 0, {}, 1).ok());
  const int port = (*server)->port();
  server->reset();  // stopped: nobody answers any more
  auto refused = HttpGet("127.0.0.1", port, "/x", 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kConnectRefused);
}

TEST(MetricsEndpointTest, ParsesThePortSetting) {
  EXPECT_EQ(*ParseMetricsPort("", 3), -1);
  EXPECT_EQ(*ParseMetricsPort("0", 3), -1);
  EXPECT_EQ(*ParseMetricsPort("off", 3), -1);
  EXPECT_EQ(*ParseMetricsPort("auto", 3), 0);
  EXPECT_EQ(*ParseMetricsPort("9400", 3), 9403);
  EXPECT_EQ(*ParseMetricsPort("9400", -1), 9400);
  EXPECT_EQ(ParseMetricsPort("65535", 1).status().code(), Code::kInvalidSetting);
  EXPECT_EQ(ParseMetricsPort("-5", 0).status().code(), Code::kInvalidSetting);
  EXPECT_EQ(ParseMetricsPort("http", 0).status().code(), Code::kInvalidSetting);
}

// One test, in order: the endpoint is process-wide and the first start wins.
TEST(MetricsEndpointTest, PortInUseLeavesMetricsOffThenAutoStartsAndRegisters) {
  const choir::testing::TempDir temp("choir-exporter");
  const std::string& dir = temp.path();
  auto held = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(held.ok());
  {
    params::ScopedOverride port("CHOIR_METRICS_PORT", std::to_string(net::LocalPort(held->get())));
    params::ScopedOverride registry("CHOIR_METRICS_REGISTRY", dir);
    EXPECT_TRUE(EnsureMetricsEndpoint({"j", 0, 1, "h"}).ok());  // warned, not failed
    EXPECT_EQ(MetricsEndpointPort(), 0);
  }
  {
    params::ScopedOverride port("CHOIR_METRICS_PORT", "bogus");
    EXPECT_EQ(EnsureMetricsEndpoint({"j", 0, 1, "h"}).code(), Code::kInvalidSetting);
  }
  params::ScopedOverride port("CHOIR_METRICS_PORT", "auto");
  params::ScopedOverride registry("CHOIR_METRICS_REGISTRY", dir);
  ASSERT_TRUE(EnsureMetricsEndpoint({"endpoint-job", 1, 2, "h"}).ok());
  ASSERT_GT(MetricsEndpointPort(), 0);
  auto got = HttpGet("127.0.0.1", MetricsEndpointPort(), "/metrics", 2);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(Has(got->content_type, "version=0.0.4"));
  EXPECT_TRUE(Has(got->body, "# TYPE choir_collectives_total counter"));
  const RegistryScan scan = ScanRegistry(dir);
  ASSERT_EQ(scan.alive.size(), 1u);
  EXPECT_EQ(scan.alive[0].job, "endpoint-job");
  EXPECT_EQ(scan.alive[0].rank, 1);
  EXPECT_EQ(scan.alive[0].port, MetricsEndpointPort());
  EXPECT_TRUE(
      EnsureMetricsEndpoint({"other", 0, 1, "h"}).ok());  // already running: no second endpoint
  EXPECT_EQ(ScanRegistry(dir).alive.size(), 1u);
}

TEST(DeviceMetricsTest, AbsentLibrariesAreReportedOnceAndNotFatal) {
  DeviceCollector absent({{"libchoir-no-nvml.so.1"}, {"libchoir-no-dcmi.so"}});
  EXPECT_FALSE(absent.nvml_loaded());
  EXPECT_FALSE(absent.dcmi_loaded());
  ASSERT_EQ(absent.Describe().size(), 2u);
  EXPECT_TRUE(Has(absent.Describe()[0], "nvml: not found"));
  FamilySet set;
  set.AddAll(absent.Collect());
  EXPECT_EQ(set.Render(),
            "# HELP choir_exporter_device_library 1 when the vendor library for device metrics was "
            "loaded, else 0.\n"
            "# TYPE choir_exporter_device_library gauge\n"
            "choir_exporter_device_library{library=\"nvml\"} "
            "0\nchoir_exporter_device_library{library=\"dcmi\"} 0\n");
  // A library that loads but is not NVML/DCMI (no such symbols).
  DeviceCollector wrong({{"libm.so.6"}, {"libm.so.6"}});
  EXPECT_FALSE(wrong.nvml_loaded());
  EXPECT_TRUE(Has(wrong.Describe()[0], "present but unusable"));
  EXPECT_TRUE(Has(wrong.Describe()[1], "present but unusable"));
}

TEST(ExporterTest, MergesTargetsAndSurvivesOneThatDiesMidScrape) {
  const choir::testing::TempDir temp("choir-exporter");
  const std::string& dir = temp.path();
  auto alive = HttpServer::Start(
      "127.0.0.1", 0,
      {{"/metrics",
        [] {
          return HttpReply{
              200, "text/plain",
              "# HELP choir_collectives_total Ops.\n# TYPE choir_collectives_total counter\n"
              "choir_collectives_total{job=\"a\",rank=\"0\"} 5\n"};
        }}},
      1);
  ASSERT_TRUE(alive.ok());
  // A target that sends half a document and hangs up.
  auto dying = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(dying.ok());
  const int dying_fd = dying->get();
  std::thread half([dying_fd] {
    const int conn = accept(dying_fd, nullptr, nullptr);
    if (conn < 0) return;
    char buf[4096];
    if (read(conn, buf, sizeof(buf)) < 0) {
      close(conn);
      return;
    }
    const std::string reply =
        "HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n# TYPE choir_collectives_total "
        "counter\nchoir_coll";
    if (write(conn, reply.data(), reply.size()) < 0) {
      close(conn);
      return;
    }
    close(conn);
  });
  // A forged entry pointing off the host is never fetched.
  RegistryEntry remote = Entry("c", 0, 80);
  remote.address = "192.0.2.1";
  remote.pid = static_cast<int>(getppid());
  ASSERT_TRUE(WriteRegistryEntry(dir, Entry("a", 0, (*alive)->port())).ok());
  RegistryEntry d = Entry("b", 1, net::LocalPort(dying_fd));
  d.pid = 1;  // alive (init), separate file name
  ASSERT_TRUE(WriteRegistryEntry(dir, d).ok());
  ASSERT_TRUE(WriteRegistryEntry(dir, remote).ok());

  ExporterOptions options;
  options.registry_dir = dir;
  options.target_timeout_seconds = 2;
  options.devices = {{"libchoir-no-nvml.so.1"}, {"libchoir-no-dcmi.so"}};
  Exporter exporter(options);
  const std::string text = exporter.Render();
  half.join();
  auto parsed = ParsePrometheusText(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(Has(text, "choir_collectives_total{job=\"a\",rank=\"0\"} 5\n")) << text;
  EXPECT_TRUE(Has(text, "choir_exporter_target_up{job=\"a\",rank=\"0\",pid=\"" +
                            std::to_string(getpid()) + "\"} 1\n"));
  EXPECT_TRUE(Has(text, "choir_exporter_target_up{job=\"b\",rank=\"1\",pid=\"1\"} 0\n"));
  EXPECT_TRUE(Has(text, "choir_exporter_target_up{job=\"c\",rank=\"0\",pid=\"" +
                            std::to_string(getppid()) + "\"} 0\n"));
  EXPECT_TRUE(Has(text, "choir_exporter_targets{state=\"alive\"} 3\n"));
  EXPECT_TRUE(Has(text, "choir_exporter_target_scrape_errors_total 2\n"));
  EXPECT_TRUE(Has(text, "# TYPE choir_host_memory_total_bytes gauge\n"));
  int type_lines = 0;
  for (size_t at = text.find("# TYPE choir_collectives_total "); at != std::string::npos;
       at = text.find("# TYPE choir_collectives_total ", at + 1)) {
    ++type_lines;
  }
  EXPECT_EQ(type_lines, 1);
}

}  // namespace
}  // namespace choir::diag
