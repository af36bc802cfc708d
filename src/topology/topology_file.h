// Reading a topology file's text with the checks LoadTopologyFile applies
// (a regular file, at most 16 MiB), for callers that also need the bytes
// themselves, such as the communicator's fingerprint of the file.
//
// Thread-safety: pure function.
#ifndef CHOIR_TOPOLOGY_TOPOLOGY_FILE_H_
#define CHOIR_TOPOLOGY_TOPOLOGY_FILE_H_

#include <string>

#include "choir/status.h"

namespace choir::topology {

// The file's text, or BadTopologyFile naming the path and the reason.
Result<std::string> ReadTopologyText(const std::string& path);

}  // namespace choir::topology

#endif  // CHOIR_TOPOLOGY_TOPOLOGY_FILE_H_
