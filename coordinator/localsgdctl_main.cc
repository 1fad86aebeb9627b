// localsgdctl: the operator's command line over the coordinator's gRPC API.
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "common/client_tls_flags.h"
#include "common/command_line.h"
#include "common/control_client.h"
#include "common/file_util.h"
#include "common/grpc_channel.h"
#include "common/node_key.h"
#include "common/run_spec.h"
#include "common/status_util.h"
#include "coordinator/ctl_format.h"
#include "coordinator/status_render.h"
#include "exchange/model_client.h"
#include "exchange/model_fetcher.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051", "The coordinator's gRPC HOST:PORT.");
ABSL_FLAG(std::string, token, "",
          "Bearer token: start, stop and fetch need it (status and runs do not).");
ABSL_FLAG(std::string, token_file, "", "File holding the bearer token.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "Deadline of each call.");
ABSL_FLAG(std::string, spec, "", "start: the run spec, a text-format RunSpec file.");
ABSL_FLAG(bool, if_absent, false,
          "start: succeed without starting anything when a run with this spec is already "
          "waiting or running (a start job run again, a requeued batch job); a different "
          "active run is still an error.");
ABSL_FLAG(int, min_workers, 0,
          "start: the run's min_workers in place of the spec's (e.g. nodes x GPUs per node, "
          "computed where the job knows its shape); 0: the spec's.");
ABSL_FLAG(std::string, run_id, "",
          "stop: the run to stop (default: the active run). fetch: the run whose model to fetch "
          "(default: the active or last run; the final models of the last 3 ended runs are kept).");
ABSL_FLAG(std::string, reason, "", "stop: why, shown in status.");
ABSL_FLAG(bool, json, false, "status, runs: print JSON instead of a table.");
ABSL_FLAG(std::string, out, "",
          "fetch: where to write the committed global model, as raw little-endian fp32 values "
          "in the flat order of the model's parameters.");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(1), "watch: least time between two lines.");
ABSL_FLAG(std::string, node, "", "node_key: the node whose key to print.");
ABSL_FLAG(std::string, node_key_secret_file, "",
          "node_key: the file holding the coordinator's --node_key_secret_file secret.");
ABSL_FLAG(bool, until_done, false,
          "watch: exit when the run is COMPLETED (0), STOPPED or FAILED (1).");

namespace {

constexpr char kUsage[] =
    "the operator's command line for a localsgd coordinator.\n"
    "Usage: localsgdctl [--coordinator=HOST:PORT] [--token_file=FILE] COMMAND\n"
    "  start --spec=FILE [--if_absent] [--min_workers=N]\n"
    "                             start a run from a text-format RunSpec; --if_absent: or\n"
    "                             find it already running; --min_workers: in place of the spec's\n"
    "  stop [--run_id=ID] [--reason=TEXT]\n"
    "                             stop the active run\n"
    "  status [--json]            the run and its members\n"
    "  runs [--json]              the runs this coordinator knows, newest first\n"
    "  watch [--interval=1s] [--until_done]\n"
    "                             a line per status change until Ctrl-C\n"
    "  fetch --out=FILE [--run_id=ID]\n"
    "                             write the run's committed global model (raw fp32)\n"
    "  node_key --node=NAME --node_key_secret_file=FILE\n"
    "                             print the key node NAME's workers join with (no coordinator\n"
    "                             is asked: the secret is the coordinator's)";

int Usage(const std::string& message) {
  std::fprintf(stderr, "localsgdctl: %s (see --help)\n", message.c_str());
  return 2;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "localsgdctl: %s: %s%s\n", absl::StatusCodeToString(status.code()).c_str(),
               std::string(status.message()).c_str(), localsgd::ConnectionHint(status).c_str());
  return 1;
}

class Ctl {
 public:
  Ctl(std::shared_ptr<grpc::Channel> channel, std::shared_ptr<grpc::Channel> streaming,
      std::shared_ptr<grpc::ChannelCredentials> credentials, std::string token)
      : control_(std::move(channel), token, absl::GetFlag(FLAGS_timeout)),
        streaming_(std::move(streaming)),
        credentials_(std::move(credentials)),
        token_(std::move(token)) {}

  int Fetch() {
    const std::string path = absl::GetFlag(FLAGS_out);
    if (path.empty()) return Usage("fetch needs --out=FILE");
    // From the node leaders that hold it when they are live (checked by digest), else from
    // the coordinator.
    localsgd::ModelClient client(streaming_, token_);
    const localsgd::ModelFetcher fetcher({&client, token_, credentials_, /*member_id=*/""});
    absl::StatusOr<localsgd::ModelFetcher::Fetched> fetched =
        fetcher.Fetch(absl::GetFlag(FLAGS_run_id), absl::GetFlag(FLAGS_timeout),
                      /*include_momentum=*/false);
    if (!fetched.ok()) return Fail(fetched.status());
    const localsgd::ModelClient::Model* model = &fetched->model;
    const std::string bytes(reinterpret_cast<const char*>(model->values.data()),
                            model->values.size() * sizeof(float));
    if (absl::Status s = localsgd::WriteFileAtomically(path, bytes); !s.ok()) return Fail(s);
    std::printf("run %s round %lld global step %lld: %zu values (from %s) written to %s\n",
                model->run_id.c_str(), static_cast<long long>(model->round),
                static_cast<long long>(model->global_step), model->values.size(),
                fetched->source.c_str(), path.c_str());
    return 0;
  }

  int Start() {
    const std::string path = absl::GetFlag(FLAGS_spec);
    if (path.empty()) return Usage("start needs --spec=FILE");
    constexpr int64_t kMaxSpecBytes = 1 << 20;  // a run spec is a few lines of text
    absl::StatusOr<std::string> text = localsgd::ReadFile(path, kMaxSpecBytes);
    if (!text.ok()) return Fail(text.status());
    absl::StatusOr<localsgd::v1::RunSpec> spec = localsgd::ParseRunSpecText(*text);
    if (!spec.ok())
      return Fail(absl::InvalidArgumentError(absl::StrCat(path, ": ", spec.status().message())));
    const int min_workers = absl::GetFlag(FLAGS_min_workers);
    if (min_workers < 0) return Usage("--min_workers: must be >= 0");
    if (min_workers > 0) spec->set_min_workers(min_workers);
    absl::StatusOr<localsgd::v1::RunInfo> run = control_.Start(*spec);
    if (absl::IsFailedPrecondition(run.status()) && absl::GetFlag(FLAGS_if_absent)) {
      return StartedAlready(*spec);
    }
    if (!run.ok()) return Fail(run.status());
    std::printf("started %s\n", localsgd::FormatRunLine(*run).c_str());
    return 0;
  }

  // start --if_absent, when another run is active: fine if it runs this spec.
  int StartedAlready(const localsgd::v1::RunSpec& spec) {
    absl::StatusOr<localsgd::v1::CoordinatorStatus> status = control_.Status();
    if (!status.ok()) return Fail(status.status());
    absl::StatusOr<localsgd::v1::RunSpec> wanted = localsgd::NormalizeRunSpec(spec);
    if (!wanted.ok()) return Fail(wanted.status());
    localsgd::v1::RunSpec running = status->run().spec();
    if (spec.name().empty()) running.clear_name();  // named after its run id
    if (!google::protobuf::util::MessageDifferencer::Equals(*wanted, running)) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "run ", status->run().run_id(), " is active with another spec; stop it first")));
    }
    std::printf("already active: %s\n", localsgd::FormatRunLine(status->run()).c_str());
    return 0;
  }

  int Stop() {
    absl::StatusOr<localsgd::v1::RunInfo> run =
        control_.Stop(absl::GetFlag(FLAGS_run_id), absl::GetFlag(FLAGS_reason));
    if (!run.ok()) return Fail(run.status());
    std::printf("stopped %s\n", localsgd::FormatRunLine(*run).c_str());
    return 0;
  }

  int Status() {
    absl::StatusOr<localsgd::v1::CoordinatorStatus> status = control_.Status();
    if (!status.ok()) return Fail(status.status());
    std::string out = absl::GetFlag(FLAGS_json) ? localsgd::StatusToJson(*status)
                                                : localsgd::FormatStatusTable(*status);
    std::fputs(out.c_str(), stdout);
    return 0;
  }

  int Runs() {
    absl::StatusOr<localsgd::v1::ListRunsResponse> runs = control_.Runs();
    if (!runs.ok()) return Fail(runs.status());
    std::string out =
        absl::GetFlag(FLAGS_json) ? localsgd::ProtoToJson(*runs) : localsgd::FormatRunsTable(*runs);
    std::fputs(out.c_str(), stdout);
    return 0;
  }

  int Watch() {
    int code = 0;
    absl::Status result = control_.Watch(
        absl::GetFlag(FLAGS_interval), [&](const localsgd::v1::CoordinatorStatus& status) {
          std::printf("%s\n", localsgd::FormatWatchLine(status).c_str());
          std::fflush(stdout);
          const localsgd::v1::RunState state = status.run().state();
          if (absl::GetFlag(FLAGS_until_done) && (state == localsgd::v1::RUN_STATE_COMPLETED ||
                                                  state == localsgd::v1::RUN_STATE_STOPPED ||
                                                  state == localsgd::v1::RUN_STATE_FAILED)) {
            code = state == localsgd::v1::RUN_STATE_COMPLETED ? 0 : 1;
            return false;
          }
          return true;
        });
    return result.ok() ? code : Fail(result);
  }

 private:
  localsgd::ControlClient control_;
  std::shared_ptr<grpc::Channel> streaming_;               // large messages (model chunks)
  std::shared_ptr<grpc::ChannelCredentials> credentials_;  // also for the holders' data planes
  std::string token_;
};

// Prints node --node's key under the secret in --node_key_secret_file.
int NodeKeyCommand() {
  const std::string node = absl::GetFlag(FLAGS_node);
  if (node.empty()) return Usage("node_key needs --node=NAME");
  if (absl::GetFlag(FLAGS_node_key_secret_file).empty()) {
    return Usage("node_key needs --node_key_secret_file=FILE");
  }
  absl::StatusOr<std::string> secret =
      localsgd::ReadSecretFile("--node_key_secret_file", absl::GetFlag(FLAGS_node_key_secret_file));
  if (!secret.ok()) return Fail(secret.status());
  std::printf("%s\n", localsgd::NodeKey(*secret, node).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  localsgd::HelpShowsTlsFlags("localsgdctl_main");
  std::vector<char*> args = localsgd::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    return Usage(args.size() < 2
                     ? "missing COMMAND (start, stop, status, runs, watch, fetch, node_key)"
                     : absl::StrCat("one COMMAND expected, got \"", args[2], "\" too"));
  }
  if (std::string(args[1]) == "node_key") return NodeKeyCommand();
  absl::StatusOr<std::string> token =
      localsgd::ResolveToken(absl::GetFlag(FLAGS_token), absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) return Fail(token.status());
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      localsgd::ChannelCredentialsFromFlags();
  if (!credentials.ok()) return Fail(credentials.status());
  Ctl ctl(grpc::CreateChannel(absl::GetFlag(FLAGS_coordinator), *credentials),
          localsgd::CreateStreamingChannel(absl::GetFlag(FLAGS_coordinator), *credentials),
          *credentials, *token);
  const std::string command = args[1];
  if (command == "start") return ctl.Start();
  if (command == "stop") return ctl.Stop();
  if (command == "status") return ctl.Status();
  if (command == "runs") return ctl.Runs();
  if (command == "watch") return ctl.Watch();
  if (command == "fetch") return ctl.Fetch();
  return Usage(absl::StrCat("unknown command \"", command,
                            "\" (start, stop, status, runs, watch, fetch, node_key)"));
}
