#include "worker/environment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>

namespace localsgd {
namespace {

using ::testing::HasSubstr;

EnvironmentReader Env(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

std::string Host() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

TEST(EnvironmentTest, NothingSetIsOneProcess) {
  absl::StatusOr<SessionOptions> options = SessionOptionsFromEnvironment({}, Env({}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->rank, 0);
  EXPECT_EQ(options->world_size, 1);
  EXPECT_EQ(options->local_world_size, 1);
  EXPECT_EQ(options->coordinator, SessionOptions().coordinator);
  EXPECT_EQ(options->node_name, "");  // Session::Join takes the host name
}

TEST(EnvironmentTest, Torchrun) {
  absl::StatusOr<SessionOptions> options =
      SessionOptionsFromEnvironment({}, Env({{"RANK", "3"},
                                             {"WORLD_SIZE", "4"},
                                             {"LOCAL_RANK", "1"},
                                             {"LOCAL_WORLD_SIZE", "2"},
                                             {"GROUP_RANK", "1"},
                                             {"LOCALSGD_COORDINATOR", "10.0.0.1:50051"},
                                             {"LOCALSGD_TLS_CA", "ca.pem"}}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->rank, 3);
  EXPECT_EQ(options->world_size, 4);
  EXPECT_EQ(options->local_rank, 1);
  EXPECT_EQ(options->local_world_size, 2);
  EXPECT_EQ(options->node_name, Host() + "-1");  // nodes tried on one host stay apart
  EXPECT_EQ(options->coordinator, "10.0.0.1:50051");
  EXPECT_EQ(options->tls.ca_file, "ca.pem");
}

TEST(EnvironmentTest, NodeNameWins) {
  absl::StatusOr<SessionOptions> options = SessionOptionsFromEnvironment(
      {},
      Env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"NODE_RANK", "0"}, {"LOCALSGD_NODE_NAME", "n0"}}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->node_name, "n0");
}

TEST(EnvironmentTest, SlurmUnevenNodes) {
  absl::StatusOr<SessionOptions> options =
      SessionOptionsFromEnvironment({}, Env({{"SLURM_PROCID", "6"},
                                             {"SLURM_NTASKS", "7"},
                                             {"SLURM_LOCALID", "0"},
                                             {"SLURM_NODEID", "3"},
                                             {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                                             {"SLURMD_NODENAME", "gpu17"}}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->rank, 6);
  EXPECT_EQ(options->world_size, 7);
  EXPECT_EQ(options->local_world_size, 1);
  EXPECT_EQ(options->node_name, "gpu17");
  options = SessionOptionsFromEnvironment({}, Env({{"SLURM_PROCID", "1"},
                                                   {"SLURM_NTASKS", "7"},
                                                   {"SLURM_LOCALID", "1"},
                                                   {"SLURM_NODEID", "0"},
                                                   {"SLURM_TASKS_PER_NODE", "2(x3),1"}}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->local_world_size, 2);
}

TEST(EnvironmentTest, ErrorsNameTheVariable) {
  EXPECT_THAT(SessionOptionsFromEnvironment({}, Env({{"RANK", "x"}, {"WORLD_SIZE", "2"}}))
                  .status()
                  .message(),
              HasSubstr("RANK: \"x\" is not an integer"));
  EXPECT_THAT(SessionOptionsFromEnvironment({}, Env({{"RANK", "0"}})).status().message(),
              HasSubstr("WORLD_SIZE: not set"));
  EXPECT_THAT(SessionOptionsFromEnvironment({}, Env({{"RANK", "4"}, {"WORLD_SIZE", "4"}}))
                  .status()
                  .message(),
              HasSubstr("RANK, WORLD_SIZE"));
  EXPECT_THAT(SessionOptionsFromEnvironment(
                  {}, Env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}}))
                  .status()
                  .message(),
              HasSubstr("local world size"));
  EXPECT_THAT(SessionOptionsFromEnvironment({}, Env({{"SLURM_PROCID", "0"},
                                                     {"SLURM_NTASKS", "2"},
                                                     {"SLURM_LOCALID", "0"},
                                                     {"SLURM_NODEID", "5"},
                                                     {"SLURM_TASKS_PER_NODE", "1(x2)"}}))
                  .status()
                  .message(),
              HasSubstr("SLURM_TASKS_PER_NODE"));
  EXPECT_THAT(SessionOptionsFromEnvironment({}, Env({{"LOCALSGD_TOKEN_FILE", "/nonexistent"}}))
                  .status()
                  .message(),
              HasSubstr("LOCALSGD_TOKEN_FILE"));
}

TEST(EnvironmentTest, TokenAndNodeKeyFiles) {
  const std::string token = ::testing::TempDir() + "/token";
  const std::string key = ::testing::TempDir() + "/node.key";
  for (const auto& [path, text] : {std::pair(token, "secret\n"), std::pair(key, " key \n")}) {
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(text, f);
    std::fclose(f);
  }
  absl::StatusOr<SessionOptions> options = SessionOptionsFromEnvironment(
      {}, Env({{"LOCALSGD_TOKEN_FILE", token}, {"LOCALSGD_NODE_KEY_FILE", key}}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->token, "secret");
  EXPECT_EQ(options->node_key, "key");
  EXPECT_THAT(SessionOptionsFromEnvironment({}, Env({{"LOCALSGD_NODE_KEY_FILE", "/nonexistent"}}))
                  .status()
                  .message(),
              HasSubstr("LOCALSGD_NODE_KEY_FILE"));
}

}  // namespace
}  // namespace localsgd
