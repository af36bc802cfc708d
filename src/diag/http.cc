#include "diag/http.h"

#include <httplib.h>

#include <chrono>
#include <thread>

#include "base/socket.h"

namespace choir::diag {

struct HttpServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::string host;
  int port = 0;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

const std::string& HttpServer::host() const { return impl_->host; }
int HttpServer::port() const { return impl_->port; }

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                      std::vector<HttpRoute> routes, int threads) {
  if (port < 0 || port > 65535) {
    return InvalidArgument("HTTP port " + std::to_string(port) + " is outside 0..65535");
  }
  // Resolve first so that a bad host gets choir's own message, not a bare false.
  CHOIR_ASSIGN_OR_RETURN(sockaddr_in unused, net::Resolve(host, port));
  (void)unused;
  auto impl = std::make_unique<Impl>();
  impl->host = host;
  // The default pool is max(8, cores-1) threads: far too many for a side
  // endpoint inside every rank.
  const size_t n = static_cast<size_t>(std::max(1, threads));
  impl->server.new_task_queue = [n] { return new httplib::ThreadPool(n); };
  // httplib's default also sets SO_REUSEPORT, which lets a second process bind
  // the same port and silently split the scrapes: allow address reuse only.
  impl->server.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  impl->server.set_keep_alive_max_count(100);
  impl->server.set_read_timeout(5);
  for (HttpRoute& route : routes) {
    impl->server.Get(route.path, [handler = std::move(route.handler)](const httplib::Request&,
                                                                      httplib::Response& res) {
      HttpReply reply = handler();
      res.status = reply.status;
      res.set_content(std::move(reply.body), reply.content_type.c_str());
    });
  }
  if (port == 0) {
    impl->port = impl->server.bind_to_any_port(host);
    if (impl->port <= 0) return Status(Code::kSocketError, "cannot bind an HTTP port on " + host);
  } else if (!impl->server.bind_to_port(host, port)) {
    // httplib only says "false": bind once more ourselves to get errno.
    auto probe = net::Listen(host, port);
    if (!probe.ok()) return probe.status().WithContext("serving HTTP");
    return Status(Code::kSocketError, "cannot bind HTTP port " + host + ":" + std::to_string(port));
  } else {
    impl->port = port;
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->server.listen_after_bind(); });
  // stop() is a no-op until the accept loop runs, so wait for it: otherwise
  // a quick destroy would leave the thread serving forever.
  for (int i = 0; i < 2000 && !raw->server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

Result<HttpResponse> HttpGet(const std::string& host, int port, const std::string& path,
                             double timeout_seconds) {
  const std::string url = "http://" + host + ":" + std::to_string(port) + path;
  httplib::Client client(host, port);
  const auto sec = static_cast<time_t>(timeout_seconds);
  const auto usec = static_cast<time_t>((timeout_seconds - static_cast<double>(sec)) * 1e6);
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  client.set_write_timeout(sec, usec);
  client.set_keep_alive(false);
  auto res = client.Get(path.c_str());
  if (!res) {
    const httplib::Error err = res.error();
    const std::string what = "GET " + url + ": " + httplib::to_string(err);
    if (err == httplib::Error::Connection) return Status(Code::kConnectRefused, what);
    if (err == httplib::Error::ConnectionTimeout) return Status(Code::kConnectTimeout, what);
    return Status(Code::kSocketError, what);
  }
  HttpResponse out;
  out.status = res->status;
  out.content_type = res->get_header_value("Content-Type");
  out.body = std::move(res->body);
  return out;
}

}  // namespace choir::diag
