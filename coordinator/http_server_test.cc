#include "coordinator/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testutil/wait_for.h"

namespace localsgd {
namespace {

std::unique_ptr<HttpServer> StartServer() {
  HttpServer::Options options;
  options.routes["/hello"] = [] { return HttpServer::Response{200, "text/plain", "hi\n"}; };
  options.routes["/teapot"] = [] { return HttpServer::Response{418, "text/plain", "no"}; };
  options.prefix_routes["/runs/"] = [](absl::string_view rest) {
    return HttpServer::Response{200, "text/plain", "runs:" + std::string(rest)};
  };
  options.prefix_routes["/runs/special/"] = [](absl::string_view rest) {
    return HttpServer::Response{200, "text/plain", "special:" + std::string(rest)};
  };
  auto server = HttpServer::Start(std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(*server);
}

TEST(HttpServerTest, ServesGetOnARealSocket) {
  auto server = StartServer();
  ASSERT_GT(server->port(), 0);
  EXPECT_EQ(server->address(), "127.0.0.1:" + std::to_string(server->port()));
  httplib::Client client("127.0.0.1", server->port());
  auto res = client.Get("/hello");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "hi\n");
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain");
  auto teapot = client.Get("/teapot");
  ASSERT_TRUE(teapot);
  EXPECT_EQ(teapot->status, 418);
}

TEST(HttpServerTest, PrefixRoutesGetTheRestOfThePathAndTheLongestPrefixWins) {
  auto server = StartServer();
  httplib::Client client("127.0.0.1", server->port());
  auto series = client.Get("/runs/run-1/series?x=1");
  ASSERT_TRUE(series);
  EXPECT_EQ(series->body, "runs:run-1/series");
  auto special = client.Get("/runs/special/a");
  ASSERT_TRUE(special);
  EXPECT_EQ(special->body, "special:a");
  auto none = client.Get("/runsx");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
}

TEST(HttpServerTest, UnknownPathIs404AndWritesAre405) {
  auto server = StartServer();
  httplib::Client client("127.0.0.1", server->port());
  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto post = client.Post("/hello", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  auto del = client.Delete("/hello");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 405);
}

TEST(HttpServerTest, BadOrTakenAddressFailsCleanly) {
  HttpServer::Options bad;
  bad.address = "nonsense";
  EXPECT_EQ(HttpServer::Start(std::move(bad)).status().code(), absl::StatusCode::kInvalidArgument);

  auto first = StartServer();
  HttpServer::Options taken;
  taken.address = first->address();
  const absl::Status in_use = HttpServer::Start(std::move(taken)).status();
  EXPECT_EQ(in_use.code(), absl::StatusCode::kUnavailable);
  // Issue 37, finding 12: one line that says why.
  EXPECT_TRUE(absl::StrContains(in_use.message(), "already in use")) << in_use;
}

TEST(HttpServerTest, StopIsIdempotentAndClosesThePort) {
  auto server = StartServer();
  const int port = server->port();
  server->Stop();
  server->Stop();
  httplib::Client client("127.0.0.1", port);
  EXPECT_FALSE(client.Get("/hello"));  // nobody listens any more
}

// A client socket connected to the server, for hand-written requests, from 127.0.0.`from`.
int Connect(int port, int from = 1) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in source = {};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = htonl(INADDR_LOOPBACK - 1 + static_cast<uint32_t>(from));
  if (bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) != 0) {
    close(fd);
    return -1;
  }
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Issue 12, finding 3 (slowloris): trickling clients took every worker thread, /healthz
// failed, and one of them blocked shutdown indefinitely.
TEST(HttpServerTest, TricklingClientsNeitherBlockOthersNorShutdown) {
  HttpServer::Options options;
  options.routes["/healthz"] = [] { return HttpServer::Response{200, "text/plain", "ok\n"}; };
  options.request_timeout = absl::Seconds(2);
  auto server = HttpServer::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> trickling;
  for (int i = 0; i < 64; ++i) {
    const int fd = Connect((*server)->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, "G", 1, 0), 1);
    trickling.push_back(fd);
  }
  absl::Notification done;
  std::thread trickle([&] {  // one more byte on each, every 300 ms
    do {
      for (int fd : trickling) send(fd, "E", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  });
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_read_timeout(1, 0);
  for (int probe = 0; probe < 5; ++probe) {
    auto res = client.Get("/healthz");
    ASSERT_TRUE(res) << "probe " << probe;
    EXPECT_EQ(res->status, 200);
  }
  // The trickling requests are cut at the time limit, though bytes keep coming.
  char answer[256] = {};
  ASSERT_TRUE(
      WaitFor([&] { return recv(trickling[0], answer, sizeof(answer) - 1, MSG_DONTWAIT) > 0; },
              absl::Seconds(10)));
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 408")) << answer;
  // New trickling clients again, and a shutdown that does not wait for them.
  for (int& fd : trickling) {
    close(fd);
    fd = Connect((*server)->port());
    send(fd, "G", 1, 0);
  }
  const absl::Time stop_start = absl::Now();
  (*server)->Stop();
  EXPECT_LT(absl::Now() - stop_start, absl::Seconds(1));
  done.Notify();
  trickle.join();
  for (int fd : trickling) close(fd);
}

// Issue 37, finding 12: 512 trickling connections from 4 addresses filled every slot and
// /healthz failed most probes. A newcomer now takes the slot of the busiest address's oldest
// unanswered request, even while that address connects again as fast as it is cut.
TEST(HttpServerTest, HealthzAnswersWhileFourAddressesHoldEverySlot) {
  HttpServer::Options options;
  options.routes["/healthz"] = [] { return HttpServer::Response{200, "text/plain", "ok\n"}; };
  options.request_timeout = absl::Seconds(120);  // only the displacement frees a slot
  auto server = HttpServer::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<std::pair<int, int>> trickling;  // (fd, address)
  for (int from = 1; from <= 4; ++from) {
    for (int i = 0; i < 128; ++i) {
      const int fd = Connect(port, from);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(send(fd, "G", 1, MSG_NOSIGNAL), 1);
      trickling.push_back({fd, from});
    }
  }
  absl::Notification done;
  std::atomic<int> reconnected{0};
  std::thread trickle([&] {  // one more byte on each every 100 ms; a cut one connects again
    do {
      for (auto& [fd, from] : trickling) {
        char answer[64];
        const bool cut = recv(fd, answer, sizeof(answer), MSG_DONTWAIT) >= 0 ||
                         send(fd, "E", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
        if (!cut) continue;
        close(fd);
        fd = Connect(port, from);
        if (fd >= 0) send(fd, "G", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        ++reconnected;
      }
    } while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  });
  int answered = 0;
  for (int probe = 0; probe < 40; ++probe) {
    const int fd = Connect(port, 5);
    ASSERT_GE(fd, 0);
    const std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char answer[256] = {};
    timeval timeout = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    if (recv(fd, answer, sizeof(answer) - 1, 0) > 0 && absl::StartsWith(answer, "HTTP/1.1 200")) {
      ++answered;
    }
    close(fd);
    absl::SleepFor(absl::Milliseconds(50));
  }
  done.Notify();
  trickle.join();
  for (auto& [fd, from] : trickling) close(fd);
  EXPECT_EQ(answered, 40);
  EXPECT_GT(reconnected.load(), 0);  // the probes did displace tricklers
}

TEST(HttpServerTest, ConnectionsAreLimitedPerClientAndMalformedRequestsRefused) {
  HttpServer::Options options;
  options.routes["/healthz"] = [] { return HttpServer::Response{200, "text/plain", "ok\n"}; };
  options.max_connections_per_client = 3;
  auto server = HttpServer::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> held;
  // Accepted in the order they connected: these three first.
  for (int i = 0; i < 3; ++i) held.push_back(Connect((*server)->port()));
  const int extra = Connect((*server)->port());
  char answer[256] = {};
  const ssize_t n = recv(extra, answer, sizeof(answer) - 1, 0);
  ASSERT_GT(n, 0);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 503")) << answer;
  close(extra);
  for (int fd : held) close(fd);
  // Once the server has seen them close, their slots are free again: a malformed request
  // then gets 400 (503 until then).
  EXPECT_TRUE(WaitFor(
      [&] {
        const int bad = Connect((*server)->port());
        const std::string garbage = "NONSENSE\r\n\r\n";
        send(bad, garbage.data(), garbage.size(), 0);
        std::memset(answer, 0, sizeof(answer));
        const bool refused_as_malformed = recv(bad, answer, sizeof(answer) - 1, 0) > 0 &&
                                          absl::StartsWith(answer, "HTTP/1.1 400");
        close(bad);
        return refused_as_malformed;
      },
      absl::Seconds(10)))
      << answer;
  httplib::Client client("127.0.0.1", (*server)->port());
  auto head = client.Head("/healthz");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
}

// Issue 37, finding 12: a request head past max_request_bytes is refused even when it
// arrives whole.
TEST(HttpServerTest, AWholeRequestHeadPastTheLimitIsRefused) {
  HttpServer::Options options;
  options.routes["/healthz"] = [] { return HttpServer::Response{200, "text/plain", "ok\n"}; };
  options.max_request_bytes = 1024;
  auto server = HttpServer::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd = Connect((*server)->port());
  const std::string head =
      "GET /healthz HTTP/1.1\r\nX-Padding: " + std::string(4000, 'x') + "\r\n\r\n";
  ASSERT_EQ(send(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  char answer[256] = {};
  ASSERT_GT(recv(fd, answer, sizeof(answer) - 1, 0), 0);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 431")) << answer;
  close(fd);
}

}  // namespace
}  // namespace localsgd
