// The bytes between TcpStoreServer and the TCP store client: message structs,
// limits, and the encoders/decoders both sides use. The protocol itself is
// specified in docs/protocols.md, section "Rendezvous store protocol"; keep the
// two in step.
//
// Decoders accept any bytes: every length is checked against the limits below
// before use, trailing bytes are an error, and failures are StoreProtocol
// Statuses (never a crash, never an allocation larger than the input).
//
// Thread-safety: pure functions and constants.
#ifndef CHOIR_STORE_TCP_STORE_WIRE_H_
#define CHOIR_STORE_TCP_STORE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "choir/status.h"
#include "choir/version.h"
#include "store/store_internal.h"

namespace choir::store::wire {

// First field of Hello: the bytes "CHST" in order.
inline constexpr uint32_t kMagic = 0x54534843;
inline constexpr size_t kFrameHeaderBytes = 4;
inline constexpr size_t kMaxJobIdBytes = 1024;
inline constexpr size_t kMaxMessageBytes = 16 * 1024;
// The largest valid request (a Set with a 4 KiB key and a 64 MiB value) and
// response (a Get) fit with room to spare.
inline constexpr size_t kMaxFrameBodyBytes = kMaxValueBytes + 64 * 1024;

enum class MsgType : uint8_t {
  kHello = 0x01,
  kHelloReply = 0x02,
  kSet = 0x10,
  kGet = 0x11,
  kAdd = 0x12,
  kCompareSet = 0x13,
  kDelete = 0x14,
  kWait = 0x15,
  kCheck = 0x16,
  kResponse = 0x20,
};

// "Set", "Get", ... ("0x7f" for an unknown byte).
std::string MsgTypeName(MsgType type);

// First frame of a connection, client to server. Fields after `version` are
// only decoded when `version` equals kProtocolVersion.
struct Hello {
  uint32_t magic = kMagic;
  uint32_t version = kProtocolVersion;
  std::string job_id;
  int32_t rank = -1;
};

// The server's answer to Hello: code 0 accepts, any other error-table number
// refuses (JobMismatch, VersionMismatch, StoreProtocol) and the server closes.
// Its layout is frozen across protocol versions.
struct HelloReply {
  int32_t code = 0;
  uint32_t server_version = kProtocolVersion;
  std::string message;
};

struct Request {
  MsgType type = MsgType::kGet;
  std::string key;                // all but Wait/Check
  std::string value;              // Set: the value; CompareSet: desired
  std::string expected;           // CompareSet
  int64_t number = 0;             // Add: delta; Wait: timeout in ms (<= 0: check once)
  std::vector<std::string> keys;  // Wait, Check
};

struct Response {
  MsgType request_type = MsgType::kGet;  // echoes the request's type
  int32_t code = 0;                      // error-table number; 0 = OK
  std::string message;                   // the error message when code != 0
  std::string value;                     // Get, CompareSet
  int64_t number = 0;                    // Add
  bool flag = false;                     // Delete (existed), Check (all exist)
};

// Each appends one complete frame (length prefix included) to `out`.
void EncodeHello(const Hello& hello, std::string* out);
void EncodeHelloReply(const HelloReply& reply, std::string* out);
void EncodeRequest(const Request& request, std::string* out);
void EncodeResponse(const Response& response, std::string* out);

// Length of the body announced by a 4-byte frame header; StoreProtocol when it
// is 0 or above kMaxFrameBodyBytes.
Result<size_t> DecodeFrameHeader(std::string_view header);
// Finds the first frame in a receive buffer: sets *frame_bytes to its total
// size (header + body) when it is complete, to 0 when more bytes are needed.
Status NextFrame(std::string_view buffered, size_t* frame_bytes);

// Decoders take a frame body (after the length prefix).
Status DecodeHello(std::string_view body, Hello* hello);
Status DecodeHelloReply(std::string_view body, HelloReply* reply);
Status DecodeRequest(std::string_view body, Request* request);
Status DecodeResponse(std::string_view body, Response* response);

}  // namespace choir::store::wire

#endif  // CHOIR_STORE_TCP_STORE_WIRE_H_
