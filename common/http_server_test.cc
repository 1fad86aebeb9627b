#include "common/http_server.h"

#include <httplib.h>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

std::unique_ptr<HttpServer> StartServer() {
  HttpServer::Options options;
  options.routes["/hello"] = [] {
    return HttpServer::Response{200, "text/plain", "hi\n"};
  };
  options.routes["/teapot"] = [] { return HttpServer::Response{418, "text/plain", "no"}; };
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
  EXPECT_EQ(HttpServer::Start(std::move(bad)).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto first = StartServer();
  HttpServer::Options taken;
  taken.address = first->address();
  EXPECT_EQ(HttpServer::Start(std::move(taken)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(HttpServerTest, StopIsIdempotent) {
  auto server = StartServer();
  server->Stop();
  server->Stop();
}

}  // namespace
}  // namespace localsgd
