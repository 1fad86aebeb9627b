#ifndef LOCALSGD_COORDINATOR_HTTP_SERVER_H_
#define LOCALSGD_COORDINATOR_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace localsgd {

// A read-only HTTP/1.1 server for status, metrics and health: GET (and HEAD) on a fixed set of
// paths; every other method gets 405, every other path 404, a malformed request 400. One
// thread polls every socket, so a slow or hostile client holds a connection slot, never a
// thread: each request must arrive whole within `request_timeout` (headers and all), each
// client IP may hold `max_connections_per_client` connections and the server
// `max_connections` in all (when full, a new connection takes the slot of the oldest
// unanswered request of the address holding the most, if that holds more than the newcomer's
// address plus one; otherwise it is closed at once with 503), and Stop closes
// every connection without waiting for anyone. Every response closes its connection.
// Handlers run on the server's thread and must be quick.
// Thread-safe: Stop() may be called from any thread, once or more.
class HttpServer {
 public:
  struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  using Handler = std::function<Response()>;
  // Gets the rest of the path after its prefix ("ID/series" for "/runs/ID/series").
  using PrefixHandler = std::function<Response(absl::string_view rest)>;

  struct Options {
    // HOST:PORT to listen on; port 0 picks a free port.
    std::string address = "127.0.0.1:0";
    // Path ("/status") -> handler.
    std::map<std::string, Handler> routes;
    // Path prefix ("/runs/") -> handler, for paths no route names exactly; the longest
    // matching prefix wins.
    std::map<std::string, PrefixHandler> prefix_routes;
    absl::Duration request_timeout = absl::Seconds(10);
    int max_connections = 512;
    int max_connections_per_client = 128;
    // Longest request head (request line and headers) accepted.
    size_t max_request_bytes = 64 * 1024;
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
  struct Connection;

  explicit HttpServer(Options options) : options_(std::move(options)) {}
  void Loop();
  // Reads what `c` sent; answers once the request head is complete. False: close it.
  bool Read(Connection& c);
  void Answer(Connection& c, absl::string_view head);

  const Options options_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: Stop writes, the loop wakes
  std::atomic<bool> stopping_{false};
  std::mutex stop_mu_;  // Stop from several threads at once
  std::thread thread_;
  std::string address_;
  int port_ = 0;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_HTTP_SERVER_H_
