// `choir doctor` host checks, split into gathering facts and judging them.
//
// GatherHostFacts() reads the host (files under configurable roots, plus a
// few system calls) into a JSON document; JudgeHostFacts() turns facts into
// PASS/WARN/FAIL verdicts, each non-PASS with its cause and fix. Keeping the
// two apart lets tests (and operators re-reading an old snapshot) judge any
// facts without the host they came from: `choir doctor --facts FILE`.
// The JSON schemas are documented in docs/operations.md ("choir.doctor/1").
//
// Thread-safety: pure functions apart from the reads of the host.
#ifndef CHOIR_DIAG_DOCTOR_H_
#define CHOIR_DIAG_DOCTOR_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace choir::diag {

inline constexpr const char* kDoctorSchema = "choir.doctor/1";

struct DoctorRoots {
  std::string proc = "/proc";
  std::string sys = "/sys";
  std::string etc = "/etc";
  std::string shm = "/dev/shm";
  std::vector<int> extra_ports;  // checked besides choir's own
};

enum class Verdict { kPass, kWarn, kFail };
const char* VerdictName(Verdict v);

struct CheckResult {
  std::string id;     // "shm"
  std::string title;  // "/dev/shm"
  Verdict verdict = Verdict::kPass;
  std::string summary;  // what was found
  std::string cause;    // why it matters (non-PASS)
  std::string fix;      // what to do (non-PASS)
};

// Facts of this host; a source that cannot be read becomes null (never an error).
nlohmann::ordered_json GatherHostFacts(const DoctorRoots& roots);

// The interfaces and the one choir would pick (part of the host facts; also
// used by `choir doctor --cluster` for the MTU of the chosen interface).
nlohmann::ordered_json GatherInterfaceFacts(const std::string& sys_root);

// Verdicts in a fixed order; missing or null facts give WARN "could not be read".
std::vector<CheckResult> JudgeHostFacts(const nlohmann::ordered_json& facts);

// {"schema", "host", "time", "summary", "checks", "facts"}.
nlohmann::ordered_json DoctorReport(const nlohmann::ordered_json& facts,
                                    const std::vector<CheckResult>& checks);

}  // namespace choir::diag

#endif  // CHOIR_DIAG_DOCTOR_H_
