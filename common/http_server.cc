#include "common/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/address.h"

namespace localsgd {

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Options options) {
  absl::StatusOr<HostPort> address = ParseHostPort(options.address, "--http_address");
  if (!address.ok()) return address.status();

  std::unique_ptr<HttpServer> self(new HttpServer());
  self->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *self->server_;
  for (auto& [path, handler] : options.routes) {
    server.Get(path, [handler = std::move(handler)](const httplib::Request&,
                                                     httplib::Response& res) {
      Response response = handler();
      res.status = response.status;
      res.set_content(response.body, response.content_type.c_str());
    });
  }
  auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("method not allowed: this endpoint only serves reads\n", "text/plain");
  };
  server.Post(".*", not_allowed);
  server.Put(".*", not_allowed);
  server.Patch(".*", not_allowed);
  server.Delete(".*", not_allowed);
  server.Options(".*", not_allowed);
  // httplib's default adds SO_REUSEPORT, which would let a second server share a taken port.
  server.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.set_keep_alive_max_count(100);
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_payload_max_length(64 * 1024);

  if (address->port == 0) {
    self->port_ = server.bind_to_any_port(address->host);
    if (self->port_ < 0) self->port_ = 0;
  } else if (server.bind_to_port(address->host, address->port)) {
    self->port_ = address->port;
  }
  if (self->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("--http_address: cannot listen on ", options.address));
  }
  self->address_ = HostPort{address->host, self->port_}.ToString();
  self->thread_ = std::thread([&server] { server.listen_after_bind(); });
  // stop() only works on a server that is listening; wait for it so Stop() never hangs.
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return self;
}

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace localsgd
