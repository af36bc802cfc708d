#include "diag/host_metrics.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace choir::diag {
namespace {

void Shell(const std::string& command) {
  if (std::system(command.c_str()) != 0) ADD_FAILURE() << command;
}

class FakeRoot {
 public:
  FakeRoot() {
    char tmpl[] = "/tmp/choir-host-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~FakeRoot() { Shell("rm -rf '" + dir_ + "'"); }
  void Write(const std::string& rel, const std::string& text) {
    const std::string path = dir_ + "/" + rel;
    Shell("mkdir -p '" + path.substr(0, path.rfind('/')) + "'");
    std::ofstream(path) << text;
  }
  void Mkdir(const std::string& rel) { Shell("mkdir -p '" + dir_ + "/" + rel + "'"); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

std::string Render(std::vector<MetricFamily> families) {
  FamilySet set;
  set.AddAll(std::move(families));
  return set.Render();
}

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(HostMetricsTest, ReadsEverySourceFromAFakeTree) {
  FakeRoot root;
  root.Write("proc/stat",
             "cpu  10 0 5 100 0 0 0 0 0 0\ncpu0 200 0 100 1000 3 0 1 0 0 0\ncpu1 5 0 5 5 0 0 0 "
             "0\nintr 1\n");
  root.Write("proc/meminfo",
             "MemTotal:       1000 kB\nMemFree:         200 kB\nMemAvailable:    600 kB\n");
  root.Write("sys/devices/system/node/node0/meminfo",
             "Node 0 MemTotal:  800 kB\nNode 0 MemFree:   100 kB\n");
  root.Write("sys/devices/system/node/possible", "0\n");
  root.Write("sys/class/thermal/thermal_zone0/temp", "51500\n");
  root.Write("sys/class/thermal/thermal_zone0/type", "acpitz\n");
  root.Write("sys/class/hwmon/hwmon3/name", "k10temp\n");
  root.Write("sys/class/hwmon/hwmon3/temp2_input", "60000\n");
  root.Write("sys/class/net/eth9/statistics/rx_bytes", "1234\n");
  root.Write("sys/class/net/eth9/statistics/tx_bytes", "99\n");
  root.Write("sys/class/net/eth9/statistics/rx_errors", "1\n");
  root.Write("sys/class/net/eth9/statistics/tx_errors", "0\n");
  root.Write("sys/class/net/eth9/statistics/rx_dropped", "0\n");
  root.Write("sys/class/net/eth9/mtu", "9000\n");
  root.Write("sys/class/net/eth9/flags", "0x1003\n");
  root.Mkdir("shm");
  HostCollector c({root.dir() + "/proc", root.dir() + "/sys", root.dir() + "/shm"});
  const std::string text = Render(c.Collect());
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  EXPECT_TRUE(Has(text, "choir_host_cpu_seconds_total{cpu=\"0\",mode=\"user\"} " +
                            FormatSample("", {}, 200 / tick).substr(1)))
      << text;
  EXPECT_TRUE(Has(text, "choir_host_cpu_seconds_total{cpu=\"1\",mode=\"idle\"}"));
  EXPECT_FALSE(Has(text, "cpu=\"\""));  // the aggregate line is not a core
  EXPECT_TRUE(Has(text, "choir_host_memory_total_bytes 1024000\n"));
  EXPECT_TRUE(Has(text, "choir_host_memory_available_bytes 614400\n"));
  EXPECT_TRUE(Has(text, "choir_host_numa_nodes 1\n"));
  EXPECT_TRUE(Has(text, "choir_host_numa_memory_total_bytes{node=\"0\"} 819200\n"));
  EXPECT_TRUE(
      Has(text, "choir_host_temperature_celsius{sensor=\"thermal_zone0\",type=\"acpitz\"} 51.5\n"));
  EXPECT_TRUE(
      Has(text, "choir_host_temperature_celsius{sensor=\"hwmon3/temp2\",type=\"k10temp\"} 60\n"));
  EXPECT_TRUE(Has(text, "choir_host_network_receive_bytes_total{device=\"eth9\"} 1234\n"));
  EXPECT_TRUE(Has(text, "choir_host_network_mtu_bytes{device=\"eth9\"} 9000\n"));
  EXPECT_TRUE(Has(text, "choir_host_network_up{device=\"eth9\"} 1\n"));
  EXPECT_TRUE(Has(text, "choir_host_shm_size_bytes "));
  EXPECT_TRUE(c.Problems().empty()) << c.Problems()[0];
}

TEST(HostMetricsTest, UnreadableSourcesAreSkippedAndReportedOnce) {
  FakeRoot root;
  root.Mkdir("proc/stat");  // a directory where a file should be
  root.Mkdir("sys/class/thermal/thermal_zone0/temp");
  root.Write("sys/class/net/eth0/mtu", "not a number\n");
  HostCollector c({root.dir() + "/proc", root.dir() + "/sys", root.dir() + "/no-shm"});
  const std::string first = Render(c.Collect());
  const size_t problems = c.Problems().size();
  EXPECT_GE(problems, 5u);  // stat, meminfo, shm, numa, thermal temp, hwmon, net files
  const std::string second = Render(c.Collect());
  EXPECT_EQ(c.Problems().size(), problems);  // the same sources are not reported again
  EXPECT_EQ(first, second);
  EXPECT_TRUE(
      Has(first, "# TYPE choir_host_cpu_seconds_total counter\n"));  // families stay declared
  EXPECT_FALSE(Has(first, "choir_host_temperature_celsius{"));
  EXPECT_FALSE(Has(first, "choir_host_network_mtu_bytes{"));
}

}  // namespace
}  // namespace choir::diag
