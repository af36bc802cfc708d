// Serving and fetching small HTTP documents (/metrics) for the metrics
// endpoint of a rank, `choir exporter` and `choir probe`.
//
// A thin wrapper over Debian's cpp-httplib, so that its large header (and the
// -DCPPHTTPLIB_* defines it must be compiled with) stays in one file. Only GET
// is served; handlers return the whole body at once.
//
// Thread-safety: an HttpServer calls its handlers from its own worker threads
// (as many as `threads`), possibly concurrently; handlers must be thread-safe.
// Start/destroy from one thread. HttpGet may be called from any thread.
#ifndef CHOIR_DIAG_HTTP_H_
#define CHOIR_DIAG_HTTP_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "choir/status.h"

namespace choir::diag {

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpRoute {
  std::string path;  // exact path, "/metrics"
  std::function<HttpReply()> handler;
};

class HttpServer {
 public:
  // Binds host:port (port 0 = any free port) and serves `routes` until
  // destroyed. AddressInUse when the port is taken (the message names it).
  static Result<std::unique_ptr<HttpServer>> Start(const std::string& host, int port,
                                                   std::vector<HttpRoute> routes, int threads);
  ~HttpServer();  // stops serving and joins the threads
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  const std::string& host() const;
  int port() const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

// GET http://host:port/path, bounded by `timeout_seconds` for the connect and
// for each read. ConnectRefused / ConnectTimeout / SocketError name the URL.
Result<HttpResponse> HttpGet(const std::string& host, int port, const std::string& path,
                             double timeout_seconds);

}  // namespace choir::diag

#endif  // CHOIR_DIAG_HTTP_H_
