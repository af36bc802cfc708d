#include "diag/doctor.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "diag/core_copy.h"
#include "topology/machine.h"

namespace choir::diag {
namespace {

using json = nlohmann::ordered_json;

// Facts of a healthy host; each test breaks one thing.
json GoodFacts() {
  return json::parse(R"({
    "hostname": "n1", "os": "Debian GNU/Linux 12", "kernel": "6.1.0", "machine": "x86_64",
    "cpu": {"online": 64, "affinity": 64, "numa_nodes": 2},
    "hugepages": {"total": 0, "free": 0, "size_kb": 2048}, "transparent_hugepages": "always [madvise] never",
    "swappiness": 1,
    "limits": {"nofile": {"soft": 1048576, "hard": 1048576}, "memlock": {"soft": -1, "hard": -1}},
    "shm": {"path": "/dev/shm", "size_bytes": 34359738368, "free_bytes": 34000000000},
    "interfaces": {"list": [{"name": "lo", "address": "127.0.0.1", "up": true, "loopback": true, "mtu": 65536},
                            {"name": "eth0", "address": "10.0.0.5", "up": true, "loopback": false, "mtu": 9000}],
                   "chosen": {"name": "eth0", "address": "10.0.0.5", "reason": "route to the store host 10.0.0.1"},
                   "socket_ifname": "", "master_addr": "10.0.0.1", "error": ""},
    "clocksource": {"current": "tsc", "available": "tsc hpet acpi_pm"},
    "core_copy": {"measured": true, "writer_cpu": 0, "reader_cpu": 1, "cross_gbps": 24.5, "own_gbps": 31.0},
    "ports": [{"port": 29500, "purpose": "MASTER_PORT", "free": true}],
    "choir": {"version": "0.1.0", "build": "x", "kernel_isa": "avx512", "switch_points": "amd", "protocol": 1},
    "settings": {"user_set": {}, "invalid": [], "unknown_environment": []}
  })");
}

const CheckResult& Find(const std::vector<CheckResult>& checks, const std::string& id) {
  for (const CheckResult& c : checks) {
    if (c.id == id) return c;
  }
  static CheckResult none;
  ADD_FAILURE() << "no check " << id;
  return none;
}

TEST(DoctorTest, HealthyHostPassesEverything) {
  const auto checks = JudgeHostFacts(GoodFacts());
  EXPECT_EQ(checks.size(), 13u);
  for (const CheckResult& c : checks) {
    EXPECT_EQ(c.verdict, Verdict::kPass) << c.id << ": " << c.summary << " / " << c.cause;
  }
  EXPECT_NE(Find(checks, "interfaces").summary.find("choir would pick eth0 10.0.0.5"),
            std::string::npos);
  EXPECT_EQ(Find(checks, "choir").summary, "choir 0.1.0 (x), kernels avx512, amd switch points, protocol 1");
}

TEST(DoctorTest, EachProblemHasAVerdictCauseAndFix) {
  struct Case {
    const char* id;
    Verdict verdict;
    std::function<void(json&)> breakit;
  };
  const std::vector<Case> cases = {
      {"shm", Verdict::kFail,
       [](json& f) {
         f["shm"]["size_bytes"] = 64 << 20;
         f["shm"]["free_bytes"] = 60 << 20;
       }},
      {"shm", Verdict::kWarn, [](json& f) { f["shm"]["free_bytes"] = 512 << 20; }},
      {"swappiness", Verdict::kWarn, [](json& f) { f["swappiness"] = 60; }},
      {"nofile", Verdict::kFail, [](json& f) { f["limits"]["nofile"]["soft"] = 256; }},
      {"nofile", Verdict::kWarn, [](json& f) { f["limits"]["nofile"]["soft"] = 4096; }},
      {"memlock", Verdict::kWarn, [](json& f) { f["limits"]["memlock"]["soft"] = 8 << 20; }},
      {"hugepages", Verdict::kWarn, [](json& f) { f["hugepages"]["total"] = 16; }},
      {"cpu", Verdict::kWarn, [](json& f) { f["cpu"]["affinity"] = 4; }},
      {"clocksource", Verdict::kWarn, [](json& f) { f["clocksource"]["current"] = "hpet"; }},
      {"core_copy", Verdict::kWarn, [](json& f) { f["core_copy"]["cross_gbps"] = 9.5; }},
      {"core_copy", Verdict::kWarn, [](json& f) { f["core_copy"] = nullptr; }},
      {"ports", Verdict::kWarn,
       [](json& f) {
         f["ports"][0]["free"] = false;
         f["ports"][0]["holder"] = {{"pid", 42}, {"command", "python3"}};
       }},
      {"interfaces", Verdict::kFail,
       [](json& f) {
         f["interfaces"]["chosen"] = nullptr;
         f["interfaces"]["error"] = "E308";
       }},
      {"interfaces", Verdict::kWarn,
       [](json& f) { f["interfaces"]["chosen"]["address"] = "127.0.0.1"; }},
      {"interfaces", Verdict::kWarn,
       [](json& f) { f["interfaces"]["chosen"]["name"] = "docker0"; }},
      {"settings", Verdict::kFail,
       [](json& f) {
         f["settings"]["invalid"] = json::array({{{"name", "CHOIR_TIMEOUT"}, {"error", "bad"}}});
       }},
      {"settings", Verdict::kWarn,
       [](json& f) { f["settings"]["unknown_environment"] = json::array({"CHOIR_TIMOUT"}); }},
  };
  for (const Case& c : cases) {
    json facts = GoodFacts();
    c.breakit(facts);
    const auto checks = JudgeHostFacts(facts);
    const CheckResult& r = Find(checks, c.id);
    EXPECT_EQ(r.verdict, c.verdict) << c.id << ": " << r.summary;
    EXPECT_FALSE(r.cause.empty()) << c.id;
    EXPECT_FALSE(r.fix.empty()) << c.id;
    int not_pass = 0;
    for (const CheckResult& other : checks) not_pass += other.verdict != Verdict::kPass ? 1 : 0;
    EXPECT_EQ(not_pass, 1) << "breaking " << c.id << " must not affect other checks";
  }
  json facts = GoodFacts();
  facts["ports"][0]["free"] = false;
  facts["ports"][0]["holder"] = {{"pid", 42}, {"command", "python3"}};
  EXPECT_NE(
      Find(JudgeHostFacts(facts), "ports").cause.find("29500 (MASTER_PORT) by pid 42 (python3)"),
      std::string::npos);
}

// The copy between two CPUs, measured on this host: both figures when the
// process may use two CPUs, the reason otherwise; never a verdict worse than
// WARN. The healthy figures read back as they were measured.
TEST(DoctorTest, CopiesBetweenCoresAreMeasuredOrSayWhyNot) {
  const CoreCopy copy = MeasureCoreCopy(64 * 1024, 50);
  std::vector<int> cpus;
  ASSERT_TRUE(topology::AffinityCpus(&cpus));
  if (cpus.size() >= 2) {
    EXPECT_TRUE(copy.measured) << copy.why_not;
    EXPECT_GT(copy.cross_gbps, 0);
    EXPECT_GT(copy.own_gbps, 0);
    EXPECT_NE(copy.writer_cpu, copy.reader_cpu);
  } else {
    EXPECT_FALSE(copy.measured);
    EXPECT_EQ(copy.why_not, "this process may run on one CPU only");
  }
  json facts = GoodFacts();
  const CheckResult healthy = Find(JudgeHostFacts(facts), "core_copy");
  EXPECT_EQ(healthy.summary, "CPU 1 copies what CPU 0 just wrote at 24.5 GB/s, what it wrote itself at 31.0");
  facts["core_copy"] = {{"measured", false}, {"why_not", "this process may run on one CPU only"}};
  const CheckResult one_cpu = Find(JudgeHostFacts(facts), "core_copy");
  EXPECT_EQ(one_cpu.verdict, Verdict::kPass);
  EXPECT_EQ(one_cpu.summary, "not measured: this process may run on one CPU only");
  facts["core_copy"] = {{"measured", true}, {"writer_cpu", 0}, {"reader_cpu", 1}, {"cross_gbps", 9.5},
                        {"own_gbps", 31.0}};
  EXPECT_NE(Find(JudgeHostFacts(facts), "core_copy").cause.find("at 31 % of the speed"), std::string::npos);
}

TEST(DoctorTest, MissingOrWrongFactsWarnInsteadOfCrashing) {
  for (const json& facts :
       {json::object(), json::parse(R"({"shm": "huge", "cpu": [1], "limits": 3, "ports": {}})")}) {
    const auto checks = JudgeHostFacts(facts);
    EXPECT_EQ(checks.size(), 13u);
    EXPECT_EQ(Find(checks, "shm").verdict, Verdict::kWarn);
    EXPECT_EQ(Find(checks, "swappiness").verdict, Verdict::kWarn);
  }
}

TEST(DoctorTest, ReportFollowsTheSchema) {
  const auto checks = JudgeHostFacts(GoodFacts());
  const json report = DoctorReport(GoodFacts(), checks);
  EXPECT_EQ(report["schema"], kDoctorSchema);
  EXPECT_EQ(report["host"], "n1");
  EXPECT_EQ(report["summary"]["pass"], 13);
  EXPECT_EQ(report["checks"].size(), 13u);
  EXPECT_EQ(report["time"].get<std::string>().size(), 20u);  // 2026-01-01T00:00:00Z
}

TEST(DoctorTest, GatheringAnEmptyRootNeverFails) {
  DoctorRoots roots{
      "/nonexistent/proc", "/nonexistent/sys", "/nonexistent/etc", "/nonexistent/shm", {}};
  const json facts = GatherHostFacts(roots);
  EXPECT_TRUE(facts["shm"].is_null());
  EXPECT_TRUE(facts["swappiness"].is_null());
  EXPECT_EQ(JudgeHostFacts(facts).size(), 13u);
}

}  // namespace
}  // namespace choir::diag
