// The TCP store server: one thread runs an epoll loop over non-blocking
// sockets. A connection must start with a Hello (job id and protocol version
// are checked); after that each frame is a request answered in order. A Wait
// whose keys are missing is parked: it is answered when the last key appears
// (KeyChanged) or when its deadline passes (ExpireWaits), so a waiting client
// costs no thread and no polling. A client that breaks the protocol is
// dropped alone; the others never notice.
//
// Memory per client is bounded: frames are read as bytes arrive (the length
// prefix is never trusted for an allocation), a client gets no new request
// served while its previous answer is unsent or its Wait is parked, and one
// that sends more than a frame ahead anyway is dropped.
#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <unordered_map>

#include "base/clock.h"
#include "base/fd.h"
#include "base/logging.h"
#include "base/socket.h"
#include "choir/store.h"
#include "choir/version.h"
#include "store/store_internal.h"
#include "store/tcp_store_wire.h"

namespace choir {
namespace {

namespace wire = store::wire;

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr size_t kReadChunk = 64 * 1024;
// One whole frame plus one read chunk: a client that waits for each answer
// (as the protocol requires) never has more than this unprocessed.
constexpr size_t kMaxBufferedInput =
    wire::kFrameHeaderBytes + wire::kMaxFrameBodyBytes + kReadChunk;
// Buffers that held a big value give their memory back once drained.
constexpr size_t kKeepBufferCapacity = 1 << 20;
constexpr int kMaxEpollTimeoutMs = 60000;
// A connection that has not sent its Hello by then is closed, so idle probes
// and port scanners do not hold file descriptors forever.
constexpr int64_t kHelloTimeoutNs = int64_t{30} * 1000000000;
// WaitTimer::park_seq of a Hello deadline (parked Waits count from 1).
constexpr uint64_t kHelloTimerSeq = 0;

struct Client {
  uint64_t id = 0;
  Fd fd;
  std::string peer;  // "10.0.0.2:41234"
  int rank = -1;
  bool accepted = false;  // Hello accepted
  bool closing = false;   // close once `out` is sent (after refusing the Hello)
  bool dead = false;      // dropped; erased at the end of the loop iteration
  bool want_write = false;
  std::string in;
  std::string out;
  size_t out_pos = 0;

  // The parked Wait, if any.
  bool parked = false;
  uint64_t park_seq = 0;
  std::vector<std::string> wait_keys;
  std::vector<std::string> wait_missing;
  std::chrono::milliseconds wait_timeout{0};

  std::string Name() const {
    return rank >= 0 ? fmt::format("rank {} at {}", rank, peer) : fmt::format("client at {}", peer);
  }
};

// A parked Wait's deadline, or a Hello deadline (park_seq == kHelloTimerSeq).
struct WaitTimer {
  int64_t deadline_ns;
  uint64_t client_id;
  uint64_t park_seq;
  bool operator>(const WaitTimer& other) const { return deadline_ns > other.deadline_ns; }
};

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  TcpStoreServerImpl(const TcpStoreServerOptions& options, Fd listen_fd, Fd epoll_fd, Fd wake_fd)
      : job_id_(options.job_id),
        listen_fd_(std::move(listen_fd)),
        epoll_fd_(std::move(epoll_fd)),
        wake_fd_(std::move(wake_fd)),
        port_(net::LocalPort(listen_fd_.get())) {}

  ~TcpStoreServerImpl() override { Stop(); }

  void StartThread() {
    thread_ = std::thread([this] { Run(); });
  }

  int port() const override { return port_; }
  int num_clients() const override { return num_clients_.load(std::memory_order_relaxed); }

  void Stop() override {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    stop_.store(true);
    const uint64_t one = 1;
    if (write(wake_fd_.get(), &one, sizeof(one)) < 0) {
      CHOIR_LOG(Warn, STORE, "store server :{}: cannot wake its thread: {}", port_,
                std::strerror(errno));
    }
    if (thread_.joinable()) thread_.join();
    clients_.clear();
    num_clients_.store(0);
    listen_fd_.Reset();
    epoll_fd_.Reset();
    wake_fd_.Reset();
    CHOIR_LOG(Debug, STORE, "store server :{} stopped", port_);
  }

 private:
  void Run() {
    CHOIR_LOG(Debug, STORE, "store server listening on {} for job '{}'",
              net::LocalAddress(listen_fd_.get()), job_id_);
    epoll_event events[64];
    while (!stop_.load()) {
      const int n = epoll_wait(epoll_fd_.get(), events, 64, NextTimeoutMs());
      if (n < 0) {
        if (errno == EINTR) continue;
        CHOIR_LOG(Error, STORE, "store server :{}: epoll_wait failed: {}; serving stops", port_,
                  std::strerror(errno));
        break;
      }
      for (int i = 0; i < n; ++i) {
        const uint64_t id = events[i].data.u64;
        if (id == kWakeId) {
          uint64_t value = 0;
          if (read(wake_fd_.get(), &value, sizeof(value)) < 0) {
            // Nothing to do: the eventfd only exists to interrupt epoll_wait.
          }
        } else if (id == kListenId) {
          AcceptAll();
        } else {
          OnClientEvent(id, events[i].events);
        }
      }
      ExpireWaits();
      ServiceReady();
      ReapDead();
    }
  }

  Client* Find(uint64_t id) {
    const auto it = clients_.find(id);
    return it == clients_.end() || it->second->dead ? nullptr : it->second.get();
  }

  void AcceptAll() {
    while (true) {
      const int fd = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          CHOIR_LOG(Warn, STORE, "store server :{}: accept failed: {}", port_,
                    std::strerror(errno));
        }
        return;
      }
      auto client = std::make_unique<Client>();
      client->id = next_id_++;
      client->fd = Fd(fd);
      client->peer = net::PeerAddress(fd);
      net::SetNoDelay(fd).IgnoreError();  // latency only; the connection works without it
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = client->id;
      if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        CHOIR_LOG(Warn, STORE, "store server :{}: cannot watch {}: {}", port_, client->peer,
                  std::strerror(errno));
        continue;
      }
      CHOIR_LOG(Debug, STORE, "store server :{}: connection from {}", port_, client->peer);
      timers_.push(WaitTimer{NowNanos() + kHelloTimeoutNs, client->id, kHelloTimerSeq});
      clients_.emplace(client->id, std::move(client));
    }
  }

  void OnClientEvent(uint64_t id, uint32_t events) {
    Client* c = Find(id);
    if (c == nullptr) return;
    if (events & EPOLLOUT) Service(*c);
    if (!c->dead && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) ReadFrom(*c);
  }

  void ReadFrom(Client& c) {
    char buf[kReadChunk];
    while (!c.dead) {
      const ssize_t n = recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        Service(c);
        if (!c.dead && c.in.size() > kMaxBufferedInput) {
          Drop(c, "it sent more than one frame ahead without reading the answers");
        }
        continue;
      }
      if (n == 0) {
        Drop(c, "it closed the connection");
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      Drop(c, fmt::format("recv failed: {}", std::strerror(errno)));
    }
  }

  // Sends what is queued, then serves complete frames while the client is
  // allowed another request.
  void Service(Client& c) {
    while (!c.dead) {
      Flush(c);
      if (c.dead || !c.out.empty()) return;
      if (c.closing) {
        Drop(c, "its Hello was refused");
        return;
      }
      if (c.parked) return;
      size_t frame_bytes = 0;
      const Status status = wire::NextFrame(c.in, &frame_bytes);
      if (!status.ok()) {
        Drop(c, status.message());
        return;
      }
      if (frame_bytes == 0) {
        if (c.in.empty() && c.in.capacity() > kKeepBufferCapacity) std::string().swap(c.in);
        return;
      }
      HandleFrame(c, std::string_view(c.in).substr(wire::kFrameHeaderBytes,
                                                   frame_bytes - wire::kFrameHeaderBytes));
      c.in.erase(0, frame_bytes);
    }
  }

  void Flush(Client& c) {
    while (c.out_pos < c.out.size()) {
      const ssize_t n = send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_pos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!c.want_write) SetInterest(c, true);
        return;
      }
      Drop(c, fmt::format("send failed: {}", std::strerror(errno)));
      return;
    }
    c.out.clear();
    c.out_pos = 0;
    if (c.out.capacity() > kKeepBufferCapacity) std::string().swap(c.out);
    if (c.want_write) SetInterest(c, false);
  }

  void SetInterest(Client& c, bool want_write) {
    epoll_event ev{};
    ev.events = EPOLLIN | (want_write ? EPOLLOUT : 0u);
    ev.data.u64 = c.id;
    if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) != 0) {
      Drop(c, fmt::format("epoll_ctl failed: {}", std::strerror(errno)));
      return;
    }
    c.want_write = want_write;
  }

  void HandleFrame(Client& c, std::string_view body) {
    if (!c.accepted) {
      HandleHello(c, body);
      return;
    }
    wire::Request request;
    const Status status = wire::DecodeRequest(body, &request);
    if (!status.ok()) {
      Drop(c, status.message());
      return;
    }
    HandleRequest(c, std::move(request));
  }

  void HandleHello(Client& c, std::string_view body) {
    wire::Hello hello;
    const Status status = wire::DecodeHello(body, &hello);
    wire::HelloReply reply;
    if (!status.ok()) {
      reply.code = static_cast<int32_t>(Code::kStoreProtocol);
      reply.message = fmt::format("the choir store at port {} could not read the Hello: {}", port_,
                                  status.message());
    } else if (hello.version != static_cast<uint32_t>(kProtocolVersion)) {
      reply.code = static_cast<int32_t>(Code::kVersionMismatch);
      reply.message = fmt::format(
          "the client speaks store protocol version {}; this store (choir {}) speaks version {}",
          hello.version, kVersionString, kProtocolVersion);
    } else if (hello.job_id != job_id_) {
      reply.code = static_cast<int32_t>(Code::kJobMismatch);
      reply.message =
          fmt::format("rank {} belongs to job {} but this store serves job {}", hello.rank,
                      store::QuoteKey(hello.job_id), store::QuoteKey(job_id_));
    }
    if (reply.code != 0) {
      CHOIR_LOG(Debug, STORE, "store server :{}: refusing {}: {}", port_, c.Name(), reply.message);
      c.closing = true;
    } else {
      c.accepted = true;
      c.rank = hello.rank;
      num_clients_.fetch_add(1);
      CHOIR_LOG(Debug, STORE, "store server :{}: accepted {}", port_, c.Name());
    }
    wire::EncodeHelloReply(reply, &c.out);
  }

  void HandleRequest(Client& c, wire::Request request) {
    wire::Response response;
    response.request_type = request.type;
    switch (request.type) {
      case wire::MsgType::kSet:
        table_.Set(request.key, std::move(request.value));
        KeyChanged(request.key);
        break;
      case wire::MsgType::kGet:
        if (const std::string* value = table_.Find(request.key)) {
          response.value = *value;
        } else {
          SetError(&response,
                   Status(Code::kKeyNotFound,
                          "store key " + store::QuoteKey(request.key) + " does not exist"));
        }
        break;
      case wire::MsgType::kAdd: {
        Result<int64_t> sum = table_.Add(request.key, request.number);
        if (sum.ok()) {
          response.number = *sum;
          KeyChanged(request.key);
        } else {
          SetError(&response, sum.status());
        }
        break;
      }
      case wire::MsgType::kCompareSet:
        response.value = table_.CompareSet(request.key, request.expected, request.value);
        KeyChanged(request.key);
        break;
      case wire::MsgType::kDelete:
        response.flag = table_.Delete(request.key);
        break;
      case wire::MsgType::kCheck:
        response.flag = table_.Missing(request.keys).empty();
        break;
      case wire::MsgType::kWait:
        if (Park(c, std::move(request.keys), request.number)) return;  // answered later
        if (!c.wait_missing.empty()) {
          SetError(&response,
                   store::MissingKeysError(c.wait_missing, c.wait_keys.size(), c.wait_timeout));
        }
        Unpark(c);
        break;
      default:
        Drop(c, "unexpected request type " + wire::MsgTypeName(request.type));
        return;
    }
    wire::EncodeResponse(response, &c.out);
  }

  static void SetError(wire::Response* response, const Status& status) {
    response->code = status.number();
    response->message = status.message();
  }

  // Records the Wait on the client. Returns true when it stays parked (keys
  // missing and time left); false when it can be answered now.
  bool Park(Client& c, std::vector<std::string> keys, int64_t timeout_ms) {
    c.wait_missing = table_.Missing(keys);
    c.wait_keys = std::move(keys);
    c.wait_timeout = store::NonNegative(std::chrono::milliseconds(timeout_ms));
    if (c.wait_missing.empty() || c.wait_timeout.count() == 0) return false;
    c.parked = true;
    ++c.park_seq;
    IndexWaiter(c);
    if (c.wait_timeout < store::kForever) {
      timers_.push(WaitTimer{NowNanos() + c.wait_timeout.count() * 1000000, c.id, c.park_seq});
    }
    return true;
  }

  void Unpark(Client& c) {
    c.parked = false;
    c.wait_keys.clear();
    c.wait_missing.clear();
  }

  void IndexWaiter(const Client& c) {
    for (const std::string& key : c.wait_missing) waiters_[key].push_back(c.id);
  }

  void UnindexWaiter(const Client& c) {
    for (const std::string& key : c.wait_missing) {
      const auto it = waiters_.find(key);
      if (it == waiters_.end()) continue;
      std::erase(it->second, c.id);
      if (it->second.empty()) waiters_.erase(it);
    }
  }

  // Answers the parked Waits that `key` completes.
  void KeyChanged(const std::string& key) {
    const auto it = waiters_.find(key);
    if (it == waiters_.end() || table_.Find(key) == nullptr) return;
    const std::vector<uint64_t> ids = std::move(it->second);
    waiters_.erase(it);
    for (const uint64_t id : ids) {
      Client* w = Find(id);
      if (w == nullptr || !w->parked) continue;
      std::erase(w->wait_missing, key);
      if (!w->wait_missing.empty()) continue;
      // A key counted earlier may have been deleted since: check them all.
      w->wait_missing = table_.Missing(w->wait_keys);
      if (!w->wait_missing.empty()) {
        IndexWaiter(*w);
        continue;
      }
      Unpark(*w);
      Answer(*w, wire::Response{.request_type = wire::MsgType::kWait});
    }
  }

  void ExpireWaits() {
    const int64_t now = NowNanos();
    while (!timers_.empty() && timers_.top().deadline_ns <= now) {
      const WaitTimer timer = timers_.top();
      timers_.pop();
      Client* c = Find(timer.client_id);
      if (c == nullptr || !TimerIsLive(*c, timer)) continue;
      if (timer.park_seq == kHelloTimerSeq) {
        Drop(*c, "it sent no Hello in time");
        continue;
      }
      UnindexWaiter(*c);
      wire::Response response{.request_type = wire::MsgType::kWait};
      SetError(&response,
               store::MissingKeysError(c->wait_missing, c->wait_keys.size(), c->wait_timeout));
      CHOIR_LOG(Debug, STORE, "store server :{}: Wait of {} timed out: {}", port_, c->Name(),
                response.message);
      Unpark(*c);
      Answer(*c, response);
    }
  }

  // Queues an answer to a parked Wait; the client is served again at the end
  // of the loop iteration (not here, to keep KeyChanged free of recursion).
  void Answer(Client& c, const wire::Response& response) {
    wire::EncodeResponse(response, &c.out);
    ready_.push_back(c.id);
  }

  void ServiceReady() {
    while (!ready_.empty()) {
      std::vector<uint64_t> ids;
      ids.swap(ready_);
      for (const uint64_t id : ids) {
        if (Client* c = Find(id)) Service(*c);
      }
    }
  }

  static bool TimerIsLive(const Client& c, const WaitTimer& timer) {
    if (timer.park_seq == kHelloTimerSeq) return !c.accepted && !c.closing;
    return c.parked && c.park_seq == timer.park_seq;
  }

  int NextTimeoutMs() {
    while (!timers_.empty()) {
      const WaitTimer& top = timers_.top();
      const Client* c = Find(top.client_id);
      if (c != nullptr && TimerIsLive(*c, top)) break;
      timers_.pop();  // the Wait was answered, the Hello arrived, or the client left
    }
    if (timers_.empty()) return -1;
    const int64_t left_ns = timers_.top().deadline_ns - NowNanos();
    if (left_ns <= 0) return 0;
    return static_cast<int>(std::min<int64_t>((left_ns + 999999) / 1000000, kMaxEpollTimeoutMs));
  }

  void Drop(Client& c, const std::string& why) {
    if (c.dead) return;
    CHOIR_LOG(Debug, STORE, "store server :{}: dropping {}: {}", port_, c.Name(), why);
    if (c.parked) {
      UnindexWaiter(c);
      Unpark(c);
    }
    if (c.accepted) num_clients_.fetch_sub(1);
    epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
    c.fd.Reset();
    c.dead = true;
    dead_.push_back(c.id);
  }

  // Frees dropped clients; deferred so that no handler holds a dangling reference.
  void ReapDead() {
    for (const uint64_t id : dead_) clients_.erase(id);
    dead_.clear();
  }

  const std::string job_id_;
  Fd listen_fd_;
  Fd epoll_fd_;
  Fd wake_fd_;
  const int port_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> num_clients_{0};
  std::mutex stop_mu_;
  bool stopped_ = false;  // guarded by stop_mu_

  // Owned by the server thread (and touched by Stop only after joining it).
  store::KeyTable table_;
  std::unordered_map<uint64_t, std::unique_ptr<Client>> clients_;
  uint64_t next_id_ = 2;  // 0 and 1 tag the listening socket and the eventfd
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;
  std::priority_queue<WaitTimer, std::vector<WaitTimer>, std::greater<>> timers_;
  std::vector<uint64_t> ready_;
  std::vector<uint64_t> dead_;
};

Status Watch(int epoll_fd, int fd, uint64_t id) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = id;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return ErrnoError(Code::kSystemError, errno, "epoll_ctl(ADD)");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const TcpStoreServerOptions& options) {
  if (options.job_id.size() > wire::kMaxJobIdBytes) {
    return InvalidArgument(fmt::format("store job id is {} bytes; the limit is {}",
                                       options.job_id.size(), wire::kMaxJobIdBytes));
  }
  const std::string where = fmt::format("{}:{}", options.host, options.port);
  Result<Fd> listen_fd = net::Listen(options.host, options.port);
  if (!listen_fd.ok()) {
    return listen_fd.status().WithContext("starting the choir store server on " + where);
  }
  CHOIR_RETURN_IF_ERROR(net::SetNonBlocking(listen_fd->get(), true));
  Fd epoll_fd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd.valid()) return ErrnoError(Code::kSystemError, errno, "epoll_create1");
  Fd wake_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd.valid()) return ErrnoError(Code::kSystemError, errno, "eventfd");
  CHOIR_RETURN_IF_ERROR(Watch(epoll_fd.get(), listen_fd->get(), kListenId));
  CHOIR_RETURN_IF_ERROR(Watch(epoll_fd.get(), wake_fd.get(), kWakeId));
  auto server = std::make_unique<TcpStoreServerImpl>(options, std::move(listen_fd).value(),
                                                     std::move(epoll_fd), std::move(wake_fd));
  server->StartThread();
  return std::unique_ptr<TcpStoreServer>(std::move(server));
}

}  // namespace choir
