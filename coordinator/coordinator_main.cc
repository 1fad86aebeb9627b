// The localsgd coordinator: membership, run control, status. See README.md.
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/address.h"
#include "common/auth.h"
#include "common/command_line.h"
#include "common/log.h"
#include "common/process_tuning.h"
#include "coordinator/coordinator_server.h"

ABSL_FLAG(std::string, grpc_address, "127.0.0.1:50051",
          "HOST:PORT for the gRPC API (workers and operators); port 0 picks a free port.");
ABSL_FLAG(std::string, http_address, "127.0.0.1:8080",
          "HOST:PORT for the read-only HTTP status endpoint (/, /status, /metrics, /healthz); "
          "port 0 picks a free port; empty serves none.");
ABSL_FLAG(std::string, token, "",
          "Bearer token that Join/Heartbeat/Leave/StartRun/StopRun must carry; empty turns "
          "auth off. Prefer --token_file: flags show in process lists.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the bearer token (surrounding whitespace "
          "is ignored).");
ABSL_FLAG(std::string, node_key_secret_file, "",
          "File holding a secret only the operator and the coordinator know; set: a Join must "
          "carry its node's key made from it (localsgdctl node_key --node=NAME), so the run "
          "token alone no longer admits a worker in any node's name.");
ABSL_FLAG(std::string, state_dir, "",
          "Folder where the run record is kept, so a restarted coordinator carries on the same "
          "run; empty keeps nothing.");
ABSL_FLAG(double, model_save_share, 0.05,
          "With --state_dir: the share of time spent writing the global model behind the "
          "commits (model.bin), in (0, 1]. After a write that took T the next waits "
          "T (1/share - 1): a restart loses at most the rounds of about T/share. 1: every "
          "commit's model as soon as the disk allows.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) for the gRPC port; set with --tls_key: serve over TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA that client certificates must chain to; set: mutual TLS (clients without a "
          "valid certificate are refused).");
ABSL_FLAG(bool, insecure, false,
          "Serve a --grpc_address other hosts can reach without a token (anyone who reaches it "
          "can then start and stop runs and join them). Without this flag the coordinator "
          "refuses to start so.");
ABSL_FLAG(absl::Duration, lease_timeout, absl::Seconds(15),
          "A worker whose heartbeats stop for this long is removed.");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(3),
          "How often workers are told to heartbeat; must be below --lease_timeout.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(5),
          "On SIGTERM/SIGINT, how long calls in flight may take to finish.");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "coordinator: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  localsgd::TuneProcess();
  absl::SetProgramUsageMessage(
      "The localsgd coordinator: tracks workers, runs and sync rounds.\n"
      "Usage: coordinator [--grpc_address=HOST:PORT] [--http_address=HOST:PORT] "
      "[--token_file=FILE] [--state_dir=DIR]");
  std::vector<char*> args = localsgd::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    std::fprintf(stderr, "coordinator: unexpected argument \"%s\" (see --help)\n", args[1]);
    return 2;
  }

  // Block the stop signals before any thread starts, so that only sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<std::string> token =
      localsgd::ResolveToken(absl::GetFlag(FLAGS_token), absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) return Fail(token.status());
  if (token->empty() && !absl::GetFlag(FLAGS_insecure)) {
    absl::StatusOr<localsgd::HostPort> listen =
        localsgd::ParseHostPort(absl::GetFlag(FLAGS_grpc_address), "--grpc_address");
    if (listen.ok() && !localsgd::IsLoopbackHost(listen->host)) {
      std::fprintf(stderr,
                   "coordinator: --grpc_address %s can be reached from other hosts and no token "
                   "is set: give --token_file (or --insecure to serve it without auth)\n",
                   absl::GetFlag(FLAGS_grpc_address).c_str());
      return 2;
    }
  }

  localsgd::CoordinatorServer::Options options;
  if (const std::string secret_file = absl::GetFlag(FLAGS_node_key_secret_file);
      !secret_file.empty()) {
    absl::StatusOr<std::string> secret =
        localsgd::ReadSecretFile("--node_key_secret_file", secret_file);
    if (!secret.ok()) return Fail(secret.status());
    options.node_key_secret = *std::move(secret);
  }
  options.grpc_address = absl::GetFlag(FLAGS_grpc_address);
  options.http_address = absl::GetFlag(FLAGS_http_address);
  options.token = *token;
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.model_save_share = absl::GetFlag(FLAGS_model_save_share);
  options.tls = localsgd::ServerTls{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                                    absl::GetFlag(FLAGS_tls_client_ca)};
  options.lease_timeout = absl::GetFlag(FLAGS_lease_timeout);
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  absl::StatusOr<std::unique_ptr<localsgd::CoordinatorServer>> server =
      localsgd::CoordinatorServer::Start(options);
  if (!server.ok()) return Fail(server.status());

  // Scripts wait for these two lines to learn the real ports.
  std::printf("grpc listening on %s\n", (*server)->grpc_address().c_str());
  if (!(*server)->http_address().empty()) {
    std::printf("http listening on %s\n", (*server)->http_address().c_str());
  }
  std::fflush(stdout);
  localsgd::LogInfo(absl::StrCat(
      "coordinator ready (", options.tls.Name(), ", auth ", token->empty() ? "off" : "on",
      options.node_key_secret.empty() ? "" : ", node keys required",
      options.state_dir.empty() ? ", no state dir"
                                : absl::StrCat(", state dir ", options.state_dir),
      ")"));

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  localsgd::LogInfo(absl::StrCat("received ", strsignal(signal_number), "; shutting down"));
  (*server)->Shutdown(absl::GetFlag(FLAGS_shutdown_grace));
  localsgd::LogInfo("coordinator stopped");
  return 0;
}
