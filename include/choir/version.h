// choir version and build identity, exchanged between ranks at start-up so
// that version drift between hosts is found before it causes trouble.
//
// Thread-safety: constant data.
#ifndef CHOIR_VERSION_H_
#define CHOIR_VERSION_H_

namespace choir {

inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;
inline constexpr const char* kVersionString = "0.1.0";
// Version of the bytes on the wire (store protocol, peer handshake, message
// headers, shared-memory layout). Peers with another protocol version refuse
// each other. 2: point-to-point headers carry the data type, shared slot
// headers a history of signatures. 3: on the amd switch table, with a core
// per rank, cma's allgather blocks from 512 KiB are read by the peers
// instead of written into them by their owner (ranks of one host must
// agree on who copies a block, or it is never copied).
inline constexpr int kProtocolVersion = 3;

// "0.1.0 (RelWithDebInfo, gcc 12.2.0, asan=off)".
const char* BuildString();
// The vector instruction set the reduction kernels use on this CPU ("avx512", "avx2", "generic").
const char* KernelIsa();

}  // namespace choir

#endif  // CHOIR_VERSION_H_
