// The TCP store client: one connection per client object; requests are sent
// and answered one at a time under a mutex. While a Wait is outstanding the
// other threads using the same client queue behind it (a rank that must Set
// while another of its threads Waits should use a second client).
//
// Once the connection fails (server gone, unanswered request, protocol error)
// the client does not reconnect behind the caller's back: a retried Add could
// apply twice. Every later call fails fast with StoreUnreachable naming the
// first error.
#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "base/clock.h"
#include "base/fd.h"
#include "base/socket.h"
#include "choir/store.h"
#include "choir/version.h"
#include "store/store_internal.h"
#include "store/tcp_store_wire.h"

namespace choir {
namespace {

namespace wire = store::wire;

// The server answers a Wait at its deadline; the socket deadline is a bit
// later so that the server's answer (naming the missing keys) wins the race.
std::chrono::milliseconds WaitGrace(std::chrono::milliseconds timeout) {
  return std::chrono::milliseconds(500) + timeout / 16;
}

Deadline DeadlineAfter(std::chrono::milliseconds timeout) {
  if (timeout >= store::kForever) return Deadline::Infinite();
  return Deadline::AtNanos(NowNanos() + std::max<int64_t>(timeout.count(), 0) * 1000000);
}

// Reads one frame body; the buffer grows as bytes arrive rather than to the
// announced length, so a lying peer cannot make us allocate 64 MiB up front.
Status ReadFrame(int fd, Deadline deadline, Code timeout_code, std::string* body) {
  char header[wire::kFrameHeaderBytes];
  CHOIR_RETURN_IF_ERROR(net::ReadFull(fd, header, sizeof(header), deadline, timeout_code));
  CHOIR_ASSIGN_OR_RETURN(const size_t len,
                         wire::DecodeFrameHeader(std::string_view(header, sizeof(header))));
  constexpr size_t kChunk = 1 << 20;
  body->clear();
  while (body->size() < len) {
    const size_t got = body->size();
    const size_t chunk = std::min(len - got, kChunk);
    body->resize(got + chunk);
    CHOIR_RETURN_IF_ERROR(net::ReadFull(fd, body->data() + got, chunk, deadline, timeout_code));
  }
  return Status::Ok();
}

class TcpStoreClient final : public Store {
 public:
  TcpStoreClient(const TcpStoreClientOptions& options, std::string where, Fd fd)
      : options_(options), where_(std::move(where)), fd_(std::move(fd)) {}

  Status Set(const std::string& key, const std::string& value) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    CHOIR_RETURN_IF_ERROR(store::ValidateValue(key, value));
    wire::Request request{.type = wire::MsgType::kSet, .key = key, .value = value};
    CHOIR_ASSIGN_OR_RETURN(wire::Response response, Call(request, RequestDeadline()));
    return Status::Ok();
  }

  Result<std::string> Get(const std::string& key) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    wire::Request request{.type = wire::MsgType::kGet, .key = key};
    CHOIR_ASSIGN_OR_RETURN(wire::Response response, Call(request, RequestDeadline()));
    return std::move(response.value);
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    wire::Request request{.type = wire::MsgType::kAdd, .key = key, .number = delta};
    CHOIR_ASSIGN_OR_RETURN(wire::Response response, Call(request, RequestDeadline()));
    return response.number;
  }

  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateCompareSet(key, expected, desired));
    wire::Request request{
        .type = wire::MsgType::kCompareSet, .key = key, .value = desired, .expected = expected};
    CHOIR_ASSIGN_OR_RETURN(wire::Response response, Call(request, RequestDeadline()));
    return std::move(response.value);
  }

  Result<bool> Delete(const std::string& key) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    wire::Request request{.type = wire::MsgType::kDelete, .key = key};
    CHOIR_ASSIGN_OR_RETURN(wire::Response response, Call(request, RequestDeadline()));
    return response.flag;
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKeys(keys));
    timeout = std::min(store::NonNegative(timeout), store::kForever);
    wire::Request request{.type = wire::MsgType::kWait, .number = timeout.count(), .keys = keys};
    const Deadline deadline = timeout >= store::kForever
                                  ? Deadline::Infinite()
                                  : DeadlineAfter(timeout + WaitGrace(timeout));
    CHOIR_ASSIGN_OR_RETURN(wire::Response response, Call(request, deadline));
    return Status::Ok();
  }

  Result<bool> Check(const std::vector<std::string>& keys) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKeys(keys));
    wire::Request request{.type = wire::MsgType::kCheck, .keys = keys};
    CHOIR_ASSIGN_OR_RETURN(wire::Response response, Call(request, RequestDeadline()));
    return response.flag;
  }

 private:
  Deadline RequestDeadline() const { return DeadlineAfter(options_.timeout); }

  // One request/response round trip. A failure of the connection itself
  // breaks the client; an error the server answers with does not.
  Result<wire::Response> Call(const wire::Request& request, Deadline deadline) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string op = wire::MsgTypeName(request.type);
    if (!broken_.ok()) {
      return Status(Code::kStoreUnreachable,
                    fmt::format("{} to the choir store at {} (rank {}) not sent: the connection "
                                "failed earlier ({})",
                                op, where_, options_.rank, broken_.ToString()));
    }
    std::string frame;
    wire::EncodeRequest(request, &frame);
    Status status =
        net::WriteFull(fd_.get(), frame.data(), frame.size(), deadline, Code::kStoreTimeout);
    std::string body;
    if (status.ok()) status = ReadFrame(fd_.get(), deadline, Code::kStoreTimeout, &body);
    wire::Response response;
    if (status.ok()) status = wire::DecodeResponse(body, &response);
    if (status.ok() && response.request_type != request.type) {
      status = Status(Code::kStoreProtocol,
                      "the answer is for a " + wire::MsgTypeName(response.request_type));
    }
    if (!status.ok()) {
      broken_ = status.WithContext(
          fmt::format("{} to the choir store at {} (rank {})", op, where_, options_.rank));
      fd_.Reset();
      return broken_;
    }
    if (response.code != 0) {
      return Status(static_cast<Code>(response.code), response.message)
          .WithContext("choir store at " + where_);
    }
    return response;
  }

  const TcpStoreClientOptions options_;
  const std::string where_;  // "host:port"
  std::mutex mu_;
  Fd fd_;          // guarded by mu_
  Status broken_;  // guarded by mu_; the first connection failure
};

// Sends Hello and reads the server's verdict.
Status Handshake(int fd, const TcpStoreClientOptions& options, const std::string& where,
                 Deadline deadline) {
  std::string frame;
  wire::EncodeHello(wire::Hello{.job_id = options.job_id, .rank = options.rank}, &frame);
  std::string body;
  Status status = net::WriteFull(fd, frame.data(), frame.size(), deadline);
  if (status.ok()) status = ReadFrame(fd, deadline, Code::kConnectTimeout, &body);
  wire::HelloReply reply;
  if (status.ok()) status = wire::DecodeHelloReply(body, &reply);
  if (!status.ok()) {
    return status.WithContext(fmt::format(
        "handshake of rank {} with the choir store at {} (is a choir store of this version "
        "listening there?)",
        options.rank, where));
  }
  if (reply.code != 0) {
    return Status(static_cast<Code>(reply.code),
                  fmt::format("the choir store at {} refused rank {}: {}", where, options.rank,
                              reply.message));
  }
  if (reply.server_version != static_cast<uint32_t>(kProtocolVersion)) {
    return Status(Code::kVersionMismatch,
                  fmt::format("the choir store at {} speaks store protocol version {}; this "
                              "client (choir {}) speaks version {}",
                              where, reply.server_version, kVersionString, kProtocolVersion));
  }
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<Store>> ConnectTcpStore(const TcpStoreClientOptions& options) {
  const std::string where = fmt::format("{}:{}", options.host, options.port);
  if (options.port <= 0 || options.port > 65535) {
    return InvalidArgument("choir store port " + std::to_string(options.port) +
                           " is outside 1..65535");
  }
  if (options.job_id.size() > wire::kMaxJobIdBytes) {
    return InvalidArgument(fmt::format("store job id is {} bytes; the limit is {}",
                                       options.job_id.size(), wire::kMaxJobIdBytes));
  }
  const Deadline deadline = DeadlineAfter(options.timeout);
  Result<Fd> fd = net::Connect(options.host, options.port, deadline);
  if (!fd.ok()) {
    const Code code = fd.status().code();
    const bool unreachable = code == Code::kConnectRefused || code == Code::kConnectTimeout ||
                             code == Code::kSocketError;
    return Status(
        unreachable ? Code::kStoreUnreachable : code,
        fmt::format("rank {} could not connect to the choir store at {} within {} ms: {}",
                    options.rank, where, options.timeout.count(), fd.status().ToString()));
  }
  net::SetNoDelay(fd->get()).IgnoreError();  // latency only; the connection works without it
  CHOIR_RETURN_IF_ERROR(Handshake(fd->get(), options, where, deadline));
  return std::shared_ptr<Store>(
      std::make_shared<TcpStoreClient>(options, where, std::move(fd).value()));
}

}  // namespace choir
