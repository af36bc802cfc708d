#include "transport/tcp/handshake.h"

#include <cstring>

#include "base/socket.h"
#include "choir/version.h"

namespace choir::transport {

void CopyTruncated(char* dst, size_t cap, const std::string& src) {
  const size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

namespace {
std::string Field(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

Status Refuse(int fd, Code code, const std::string& text, Deadline deadline) {
  HandshakeReply reply;
  reply.code = static_cast<int32_t>(code);
  CopyTruncated(reply.text, sizeof(reply.text), text);
  net::WriteFull(fd, &reply, sizeof(reply), deadline).IgnoreError();
  return Status(code, text);
}
}  // namespace

Status SendHello(int fd, const HandshakeHello& hello, Deadline deadline) {
  return net::WriteFull(fd, &hello, sizeof(hello), deadline);
}

Status AcceptHello(int fd, const HandshakeHello& expected, int* from_rank, int* stream, Deadline deadline) {
  HandshakeHello got;
  // The first 8 bytes (magic, protocol) are stable across versions.
  CHOIR_RETURN_IF_ERROR(net::ReadFull(fd, &got, 8, deadline));
  if (got.magic != kHandshakeMagic) {
    return Status(Code::kProtocolError, "a connection from " + net::PeerAddress(fd) +
                                            " did not start with a choir handshake; dropped it");
  }
  if (got.protocol != expected.protocol) {
    return Refuse(fd, Code::kVersionMismatch,
                  "peer at " + net::PeerAddress(fd) + " speaks choir protocol " +
                      std::to_string(got.protocol) + " but rank " + std::to_string(expected.to_rank) +
                      " speaks " + std::to_string(expected.protocol) +
                      "; install the same choir version on every host",
                  deadline);
  }
  CHOIR_RETURN_IF_ERROR(net::ReadFull(fd, reinterpret_cast<char*>(&got) + 8, sizeof(got) - 8, deadline));
  if (got.job_hash != expected.job_hash) {
    return Refuse(fd, Code::kJobMismatch,
                  "rank " + std::to_string(got.from_rank) + " at " + net::PeerAddress(fd) +
                      " belongs to job '" + Field(got.job, sizeof(got.job)) + "', not '" +
                      Field(expected.job, sizeof(expected.job)) +
                      "'; two jobs share a port or a stale process is still running",
                  deadline);
  }
  if (got.comm_hash != expected.comm_hash || got.to_rank != expected.to_rank) {
    return Refuse(fd, Code::kJobMismatch,
                  "rank " + std::to_string(got.from_rank) + " wants communicator '" +
                      Field(got.comm, sizeof(got.comm)) + "' rank " + std::to_string(got.to_rank) +
                      " but this is '" + Field(expected.comm, sizeof(expected.comm)) + "' rank " +
                      std::to_string(expected.to_rank),
                  deadline);
  }
  if (got.streams != expected.streams || got.stream < 0 || got.stream >= got.streams) {
    return Refuse(fd, Code::kInvalidSetting,
                  "rank " + std::to_string(got.from_rank) + " opens " + std::to_string(got.streams) +
                      " TCP streams per peer but rank " + std::to_string(expected.to_rank) + " expects " +
                      std::to_string(expected.streams) + "; set the same CHOIR_TCP_STREAMS on every rank",
                  deadline);
  }
  *from_rank = got.from_rank;
  *stream = got.stream;
  HandshakeReply ok;
  return net::WriteFull(fd, &ok, sizeof(ok), deadline);
}

Status ReadReply(int fd, int peer_rank, const std::string& address, Deadline deadline) {
  HandshakeReply reply;
  Status s = net::ReadFull(fd, &reply, sizeof(reply), deadline);
  if (!s.ok()) {
    return s.WithContext("handshake with rank " + std::to_string(peer_rank) + " at " + address);
  }
  if (reply.magic != kHandshakeMagic) {
    return Status(Code::kProtocolError, "rank " + std::to_string(peer_rank) + " at " + address +
                                            " answered the handshake with garbage");
  }
  if (reply.code != 0) {
    const ErrorInfo* info = FindErrorInfo(reply.code);
    return Status(info ? info->code : Code::kProtocolError,
                  "rank " + std::to_string(peer_rank) + " at " + address + " refused the connection: " +
                      Field(reply.text, sizeof(reply.text)));
  }
  return Status::Ok();
}

}  // namespace choir::transport
