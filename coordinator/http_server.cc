#include "coordinator/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/address.h"
#include "common/listen_socket.h"
#include "common/status_macros.h"

namespace localsgd {

struct HttpServer::Connection {
  int fd = -1;
  std::string client;  // its IP address, for the per-client limit
  absl::Time deadline;
  std::string in;
  std::string out;
  size_t written = 0;
  bool answering = false;
};

namespace {

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 418:
      return "I'm a teapot";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

std::string Render(int status, absl::string_view content_type, absl::string_view body,
                   bool head_only, absl::string_view extra_headers = "") {
  std::string out = absl::StrCat(
      "HTTP/1.1 ", status, " ", Reason(status), "\r\nContent-Type: ", content_type,
      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n", extra_headers, "\r\n");
  if (!head_only) absl::StrAppend(&out, body);
  return out;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

std::string PeerAddress(const sockaddr_storage& peer) {
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, text, sizeof(text));
  } else if (peer.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr, text,
              sizeof(text));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Options options) {
  LOCALSGD_ASSIGN_OR_RETURN(HostPort address, ParseHostPort(options.address, "--http_address"));
  LOCALSGD_ASSIGN_OR_RETURN(const ListenSocket listening, Listen(address, "--http_address"));
  const int fd = listening.fd;
  const int port = listening.port;
  SetNonBlocking(fd);

  std::unique_ptr<HttpServer> self(new HttpServer(std::move(options)));
  self->listen_fd_ = fd;
  self->port_ = port;
  self->address_ = HostPort{address.host, port}.ToString();
  if (pipe2(self->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(fd);
    return absl::InternalError("http server: cannot make its wake-up pipe");
  }
  self->thread_ = std::thread([raw = self.get()] { raw->Loop(); });
  return self;
}

void HttpServer::Loop() {
  std::list<Connection> connections;
  std::map<std::string, int> per_client;
  auto drop = [&](std::list<Connection>::iterator it) {
    close(it->fd);
    if (--per_client[it->client] == 0) per_client.erase(it->client);
    return connections.erase(it);
  };
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    absl::Time next_deadline = absl::Now() + absl::Seconds(1);
    for (const Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    const int wait_ms =
        std::max<int64_t>(0, absl::ToInt64Milliseconds(next_deadline - absl::Now()) + 1);
    if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) break;
    if (stopping_.load()) break;
    // Existing connections first (their pollfds follow the two fixed ones, in order).
    size_t i = 2;
    const absl::Time now = absl::Now();
    for (auto it = connections.begin(); it != connections.end(); ++i) {
      Connection& c = *it;
      const short events = i < fds.size() ? fds[i].revents : 0;
      bool keep = true;
      if (events & (POLLERR | POLLNVAL)) {
        keep = false;
      } else if (c.answering && (events & (POLLOUT | POLLHUP))) {
        const ssize_t n =
            send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
        if (n > 0) c.written += static_cast<size_t>(n);
        keep = n > 0 && c.written < c.out.size();
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) keep = true;
      } else if (!c.answering && (events & (POLLIN | POLLHUP))) {
        keep = Read(c);
      }
      if (keep && now > c.deadline) {
        if (!c.answering) {
          // Too slow (a trickling client): one short answer, best effort, then gone.
          const std::string late = Render(408, "text/plain", "request timeout\n", false);
          send(c.fd, late.data(), late.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        keep = false;
      }
      it = keep ? std::next(it) : drop(it);
    }
    if (fds[1].revents & POLLIN) {
      while (true) {
        sockaddr_storage peer = {};
        socklen_t length = sizeof(peer);
        const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &length,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        const std::string client = PeerAddress(peer);
        const std::string busy = Render(503, "text/plain", "too many connections\n", false);
        if (static_cast<int>(connections.size()) >= options_.max_connections &&
            per_client[client] < options_.max_connections_per_client) {
          // Full: the busiest other address gives up its oldest unanswered request, so a
          // few addresses holding every slot cannot keep out everyone else.
          auto busiest = per_client.end();
          for (auto p = per_client.begin(); p != per_client.end(); ++p) {
            if (busiest == per_client.end() || p->second > busiest->second) busiest = p;
          }
          if (busiest != per_client.end() && busiest->second > per_client[client] + 1) {
            const std::string victim = busiest->first;
            for (auto it = connections.begin(); it != connections.end(); ++it) {
              if (it->client == victim && !it->answering) {
                send(it->fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
                drop(it);
                break;
              }
            }
          }
        }
        if (static_cast<int>(connections.size()) >= options_.max_connections ||
            per_client[client] >= options_.max_connections_per_client) {
          send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          close(fd);
          if (per_client[client] == 0) per_client.erase(client);
          continue;
        }
        ++per_client[client];
        Connection c;
        c.fd = fd;
        c.client = client;
        c.deadline = absl::Now() + options_.request_timeout;
        connections.push_back(std::move(c));
      }
    }
  }
  for (Connection& c : connections) close(c.fd);
}

bool HttpServer::Read(Connection& c) {
  char buffer[16 * 1024];
  while (true) {
    const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0) return false;  // closed before a whole request
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    c.in.append(buffer, static_cast<size_t>(n));
    const size_t end = c.in.find("\r\n\r\n");
    if (end != std::string::npos && end + 4 <= options_.max_request_bytes) {
      Answer(c, absl::string_view(c.in).substr(0, end));
      return true;
    }
    // A head past the limit is refused whether or not it is complete yet.
    if (end != std::string::npos || c.in.size() > options_.max_request_bytes) {
      c.out = Render(431, "text/plain", "request head too large\n", false);
      c.answering = true;
      c.deadline = absl::Now() + options_.request_timeout;
      return true;
    }
  }
}

void HttpServer::Answer(Connection& c, absl::string_view head) {
  c.answering = true;
  c.deadline = absl::Now() + options_.request_timeout;  // to send the answer
  std::vector<absl::string_view> request_line =
      absl::StrSplit(head.substr(0, head.find("\r\n")), ' ');
  if (request_line.size() != 3 || !absl::StartsWith(request_line[2], "HTTP/1.") ||
      !absl::StartsWith(request_line[1], "/")) {
    c.out = Render(400, "text/plain", "malformed request\n", false);
    return;
  }
  const absl::string_view method = request_line[0];
  absl::string_view path = request_line[1];
  path = path.substr(0, path.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    c.out = Render(405, "text/plain", "method not allowed: this endpoint only serves reads\n",
                   false, "Allow: GET, HEAD\r\n");
    return;
  }
  Response response;
  if (auto route = options_.routes.find(std::string(path)); route != options_.routes.end()) {
    response = route->second();
  } else {
    // The longest prefix of `path` among the prefix routes: the last one sorting <= path
    // that is a prefix (prefixes of one path sort in order of length).
    const PrefixHandler* handler = nullptr;
    absl::string_view rest;
    for (const auto& [prefix, prefix_handler] : options_.prefix_routes) {
      if (absl::StartsWith(path, prefix)) {
        handler = &prefix_handler;
        rest = path.substr(prefix.size());
      }
    }
    if (handler == nullptr) {
      c.out = Render(404, "text/plain", "not found\n", head_only);
      return;
    }
    response = (*handler)(rest);
  }
  c.out = Render(response.status, response.content_type, response.body, head_only);
}

void HttpServer::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (!stopping_.exchange(true)) {
    if (wake_[1] >= 0) {
      const char byte = 1;
      (void)!write(wake_[1], &byte, 1);
    }
  }
  if (thread_.joinable()) thread_.join();
  for (int* fd : {&listen_fd_, &wake_[0], &wake_[1]}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace localsgd
