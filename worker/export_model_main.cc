// export_model: writes a run's committed global model as a TorchScript file that torch.jit.load
// reads and calls, as a worker's --save_model does (docs/reference.md, "export_model"): the
// run's spec from the coordinator (which model, how inputs are normalised), that model built,
// and the committed values from the members that hold them (or a node's checkpoint file).
// `localsgdctl fetch` writes the same values as raw fp32.
#include <google/protobuf/text_format.h>
#include <grpcpp/create_channel.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/client_tls_flags.h"
#include "common/command_line.h"
#include "common/grpc_channel.h"
#include "common/log.h"
#include "common/model_store.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/model_client.h"
#include "exchange/model_fetcher.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"
#include "worker/dataset.h"
#include "worker/flat_model.h"
#include "worker/model.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051", "The coordinator's gRPC HOST:PORT.");
ABSL_FLAG(std::string, token, "", "Bearer token (prefer --token_file).");
ABSL_FLAG(std::string, token_file, "", "File holding the bearer token.");
ABSL_FLAG(std::string, run_id, "", "The run (empty: the active or latest run).");
ABSL_FLAG(std::string, out, "", "Where to write the TorchScript file (required).");
ABSL_FLAG(absl::Duration, timeout, absl::Minutes(2), "How long the fetch may take.");
ABSL_FLAG(std::string, checkpoint, "",
          "A node's checkpoint file (<checkpoint_dir>/<node>/checkpoint.bin) to export instead of "
          "fetching the model from the members: for a run whose members are gone. Its run "
          "(--run_id, when given, must match) gives the spec.");

namespace localsgd {
namespace {

// The record of run `run_id` (empty: the active or latest run).
absl::StatusOr<v1::RunInfo> FindRun(v1::Coordinator::Stub& stub, const std::string& run_id,
                                    absl::Duration timeout) {
  v1::CoordinatorStatus status;
  if (grpc::Status s =
          stub.GetStatus(AuthorizedContext("", timeout).get(), v1::GetStatusRequest(), &status);
      !s.ok()) {
    return FromGrpcStatus(s);
  }
  if (run_id.empty() || status.run().run_id() == run_id) {
    if (status.run().run_id().empty()) return absl::NotFoundError("no run has started");
    return status.run();
  }
  v1::ListRunsResponse runs;
  if (grpc::Status s =
          stub.ListRuns(AuthorizedContext("", timeout).get(), v1::ListRunsRequest(), &runs);
      !s.ok()) {
    return FromGrpcStatus(s);
  }
  for (const v1::RunInfo& run : runs.runs()) {
    if (run.run_id() == run_id) return run;
  }
  return absl::NotFoundError(absl::StrCat("--run_id: the coordinator knows no run ", run_id));
}

absl::Status Export(const std::string& out) {
  LOCALSGD_ASSIGN_OR_RETURN(
      std::string token, ResolveToken(absl::GetFlag(FLAGS_token), absl::GetFlag(FLAGS_token_file)));
  LOCALSGD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                            ChannelCredentialsFromFlags());
  const std::string address = absl::GetFlag(FLAGS_coordinator);
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(address, credentials));
  // From a checkpoint: its run, round and values.
  const std::string checkpoint_path = absl::GetFlag(FLAGS_checkpoint);
  std::optional<ModelCheckpoint> checkpoint;
  if (!checkpoint_path.empty()) {
    LOCALSGD_ASSIGN_OR_RETURN(checkpoint, ModelStore::At(checkpoint_path).Load());
    if (!checkpoint.has_value()) {
      return absl::NotFoundError(absl::StrCat("--checkpoint: no file ", checkpoint_path));
    }
    const std::string& run_id = absl::GetFlag(FLAGS_run_id);
    if (!run_id.empty() && run_id != checkpoint->run_id) {
      return absl::InvalidArgumentError(absl::StrCat("--checkpoint: ", checkpoint_path,
                                                     " holds run ", checkpoint->run_id,
                                                     ", not --run_id ", run_id));
    }
  }
  LOCALSGD_ASSIGN_OR_RETURN(
      const v1::RunInfo run,
      FindRun(*stub, checkpoint.has_value() ? checkpoint->run_id : absl::GetFlag(FLAGS_run_id),
              timeout));
  const v1::RunSpec& spec = run.spec();
  LOCALSGD_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, MakeModel(spec.model(), 0));
  const std::vector<torch::Tensor> tensors = ModelTensors(*model, spec.average_buffers());
  // From the node leaders that hold it when they are live (checked by digest), else from the
  // coordinator.
  ModelClient::Model fetched;
  if (checkpoint.has_value()) {
    fetched.round = checkpoint->round;
    fetched.global_step = checkpoint->global_step;
    fetched.values = std::move(checkpoint->global);
  } else {
    ModelClient models(CreateStreamingChannel(address, credentials), token);
    const ModelFetcher fetcher({&models, token, credentials, /*member_id=*/""});
    LOCALSGD_ASSIGN_OR_RETURN(ModelFetcher::Fetched from,
                              fetcher.Fetch(run.run_id(), timeout, /*include_momentum=*/false));
    fetched = std::move(from.model);
  }
  if (static_cast<int64_t>(fetched.values.size()) != NumValues(tensors)) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", run.run_id(), "'s model has ", fetched.values.size(),
                     " values, the model its spec builds here has ", NumValues(tensors)));
  }
  {
    torch::NoGradGuard no_grad;
    Unflatten(torch::from_blob(fetched.values.data(), {static_cast<int64_t>(fetched.values.size())},
                               torch::kFloat32),
              tensors, WholeModel(tensors));
  }
  Model::SaveInfo info;
  info.run_id = run.run_id();
  info.round = fetched.round;
  info.global_step = fetched.global_step;
  const InputNormalization normalization = NormalizationOf(spec.dataset());
  info.input_divisor = normalization.divisor;
  info.input_mean = normalization.mean;
  info.input_std = normalization.std;
  google::protobuf::TextFormat::PrintToString(spec, &info.extra_files["spec.textproto"]);
  LOCALSGD_RETURN_IF_ERROR(model->Save(out, info));
  std::printf("wrote run %s's model (round %lld, global step %lld) to %s\n", info.run_id.c_str(),
              static_cast<long long>(info.round), static_cast<long long>(info.global_step),
              out.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace localsgd

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes a run's committed global model as a TorchScript file.\n"
      "Usage: export_model --coordinator=HOST:PORT --token_file=FILE [--run_id=ID] --out=FILE.pt");
  localsgd::HelpShowsTlsFlags("export_model_main");
  std::vector<char*> args = localsgd::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    std::fprintf(stderr, "export_model: unexpected argument \"%s\" (see --help)\n", args[1]);
    return 2;
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fprintf(stderr, "export_model: --out is required (see --help)\n");
    return 2;
  }
  if (absl::Status s = localsgd::Export(out); !s.ok()) {
    localsgd::LogError(absl::StrCat("export_model: ", s.ToString()));
    return 1;
  }
  return 0;
}
