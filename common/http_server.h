#ifndef LOCALSGD_COMMON_HTTP_SERVER_H_
#define LOCALSGD_COMMON_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace localsgd {

// A read-only HTTP server: GET (and HEAD) on a fixed set of paths; every other method gets
// 405, every other path 404. Handlers run on the server's worker threads.
// Thread-safe: Stop() may be called from any thread, once or more.
class HttpServer {
 public:
  struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  using Handler = std::function<Response()>;

  struct Options {
    // HOST:PORT to listen on; port 0 picks a free port.
    std::string address = "127.0.0.1:0";
    // Path ("/status") -> handler.
    std::map<std::string, Handler> routes;
  };

  // Binds, starts serving on a background thread and returns; the port is bound (and
  // connections queue) before this returns.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(Options options);

  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound address, with the real port.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  void Stop();

 private:
  HttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
  int port_ = 0;
};

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_HTTP_SERVER_H_
