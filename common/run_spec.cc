#include "common/run_spec.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/round_schedule.h"
#include "common/status_macros.h"

namespace localsgd {
namespace {

constexpr int64_t kMaxSyntheticSamples = 10'000'000;
constexpr int kMaxBatchSize = 65536;
constexpr int kMaxWorkers = 65536;
constexpr int64_t kMinChunkBytes = 4 << 10;
constexpr int64_t kMaxChunkBytes = 16 << 20;
constexpr double kMaxSeconds = 7 * 24 * 3600.0;

constexpr int kDefaultLocalSgdSteps = 8;
constexpr int kDefaultBatchSize = 64;
constexpr int64_t kDefaultTotalSteps = 1000;
constexpr double kDefaultSgdLr = 0.05;
constexpr double kDefaultAdamWLr = 1e-3;
constexpr double kDefaultRoundDeadlineSeconds = 60;
constexpr int kDefaultSuspendAfterFailedRounds = 3;
// RunSpec.max_unsynced_steps by default: this many rounds of local_sgd_steps.
constexpr int kDefaultUnsyncedRounds = 4;
constexpr double kDefaultQuorumTimeoutSeconds = 600;
// RunSpec.checkpoint_share by default: at most 5 % of the time goes to writing checkpoints.
constexpr double kDefaultCheckpointShare = 0.05;
constexpr double kDefaultRoundQuorumFraction = 0.5;
// Star rounds: every chunk passes through the coordinator, which handles fewer, larger
// messages best. Sharded rounds: a ring round's pipeline is 2 (N - 1) hops deep, each hop a
// chunk's transfer, and an all-to-all round ends with N chunks through the owner's link, so
// smaller chunks shorten both (docs/design.md, "Limits").
constexpr int64_t kDefaultStarChunkBytes = 1 << 20;
constexpr int64_t kDefaultShardedChunkBytes = 128 << 10;
// A sharded round over more owners costs a stream per owner and member: for small vectors the
// latency, not the bytes, sets the round's time.
constexpr int64_t kDefaultMinShardBytes = 1 << 20;
constexpr int64_t kMaxMinShardBytes = int64_t{1} << 30;

class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat("line ", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

absl::Status FieldError(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("spec.", field, ": ", why));
}

// Checks a value that must be finite and within [lo, hi] (or (lo, hi] when lo_open).
absl::Status CheckRange(absl::string_view field, double value, double lo, double hi,
                        bool lo_open = false, bool hi_open = false) {
  if (!std::isfinite(value)) return FieldError(field, "must be a finite number");
  if (lo_open ? value <= lo : value < lo) {
    return FieldError(field, absl::StrCat("must be ", lo_open ? "> " : ">= ", lo, ", got ", value));
  }
  if (hi_open ? value >= hi : value > hi) {
    return FieldError(field, absl::StrCat("must be ", hi_open ? "< " : "<= ", hi, ", got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckInt(absl::string_view field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return FieldError(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
  }
  return absl::OkStatus();
}

// A momentum in [0, 1), and nesterov only on top of some momentum.
absl::Status CheckMomentum(absl::string_view prefix, double momentum, bool nesterov) {
  std::string field = absl::StrCat(prefix, ".momentum");
  if (!std::isfinite(momentum) || momentum < 0 || momentum >= 1) {
    return FieldError(field, absl::StrCat("must be in [0, 1), got ", momentum));
  }
  if (nesterov && momentum == 0) {
    return FieldError(absl::StrCat(prefix, ".nesterov"), "needs momentum > 0");
  }
  return absl::OkStatus();
}

absl::Status CheckName(absl::string_view field, absl::string_view value, bool required) {
  if (value.empty()) {
    return required ? FieldError(field, "required") : absl::OkStatus();
  }
  if (value.size() > 4096) return FieldError(field, "longer than 4096 bytes");
  for (unsigned char c : value) {
    if (c < 0x20 || c == 0x7f) return FieldError(field, "contains a control character");
  }
  return absl::OkStatus();
}

absl::Status ValidateModel(const v1::RunSpec& spec) {
  if (!spec.has_model()) return FieldError("model", "required (builtin or torchscript_path)");
  const v1::ModelSpec& model = spec.model();
  switch (model.source_case()) {
    case v1::ModelSpec::kBuiltin:
      if (!IsBuiltinModel(model.builtin())) {
        return FieldError("model.builtin", absl::StrCat("unknown model \"", model.builtin(),
                                                        "\" (known: ", BuiltinModelList(), ")"));
      }
      return absl::OkStatus();
    case v1::ModelSpec::kTorchscriptPath:
      return CheckName("model.torchscript_path", model.torchscript_path(), /*required=*/true);
    case v1::ModelSpec::kCustom:
      return CheckName("model.custom", model.custom(), /*required=*/true);
    case v1::ModelSpec::SOURCE_NOT_SET:
      break;
  }
  return FieldError("model", "required (builtin or torchscript_path)");
}

absl::Status ValidateDataset(const v1::DatasetSpec& dataset) {
  if (!v1::DatasetKind_IsValid(dataset.kind())) {
    return FieldError("dataset.kind", absl::StrCat("unknown dataset kind ", dataset.kind()));
  }
  bool synthetic = dataset.kind() == v1::DATASET_KIND_UNSPECIFIED ||
                   dataset.kind() == v1::DATASET_KIND_SYNTHETIC;
  LOCALSGD_RETURN_IF_ERROR(CheckName("dataset.path", dataset.path(), /*required=*/!synthetic));
  if (dataset.has_synthetic_samples()) {
    LOCALSGD_RETURN_IF_ERROR(CheckInt("dataset.synthetic_samples", dataset.synthetic_samples(), 1,
                                      kMaxSyntheticSamples));
  }
  return absl::OkStatus();
}

absl::Status ValidateOptimizer(const v1::OptimizerSpec& opt) {
  if (!v1::OptimizerKind_IsValid(opt.kind())) {
    return FieldError("optimizer.kind", absl::StrCat("unknown optimizer ", opt.kind()));
  }
  if (opt.has_lr()) LOCALSGD_RETURN_IF_ERROR(CheckRange("optimizer.lr", opt.lr(), 0, 1e3, true));
  LOCALSGD_RETURN_IF_ERROR(CheckMomentum("optimizer", opt.momentum(), opt.nesterov()));
  LOCALSGD_RETURN_IF_ERROR(CheckRange("optimizer.weight_decay", opt.weight_decay(), 0, 1e3));
  if (opt.has_beta1())
    LOCALSGD_RETURN_IF_ERROR(CheckRange("optimizer.beta1", opt.beta1(), 0, 0.999999));
  if (opt.has_beta2())
    LOCALSGD_RETURN_IF_ERROR(CheckRange("optimizer.beta2", opt.beta2(), 0, 0.999999));
  if (opt.has_eps()) LOCALSGD_RETURN_IF_ERROR(CheckRange("optimizer.eps", opt.eps(), 0, 1, true));
  return absl::OkStatus();
}

absl::Status ValidateSchedule(const v1::RunSpec& spec, double peak_lr) {
  const v1::LrScheduleSpec& schedule = spec.lr_schedule();
  if (!v1::LrScheduleKind_IsValid(schedule.kind())) {
    return FieldError("lr_schedule.kind", absl::StrCat("unknown schedule ", schedule.kind()));
  }
  int64_t max_warmup =
      spec.duration_case() == v1::RunSpec::kTotalSteps ? spec.total_steps() : int64_t{1} << 40;
  LOCALSGD_RETURN_IF_ERROR(
      CheckInt("lr_schedule.warmup_steps", schedule.warmup_steps(), 0, max_warmup));
  return CheckRange("lr_schedule.min_lr", schedule.min_lr(), 0, peak_lr);
}

// round_seconds, round_grace_seconds and round_quorum_fraction, against the deadline.
absl::Status ValidatePacing(const v1::RunSpec& spec) {
  const double deadline = spec.has_round_deadline_seconds() ? spec.round_deadline_seconds()
                                                            : kDefaultRoundDeadlineSeconds;
  if (spec.round_seconds() != 0) {
    LOCALSGD_RETURN_IF_ERROR(
        CheckRange("round_seconds", spec.round_seconds(), 0, 3600, /*lo_open=*/true));
    if (spec.round_seconds() >= deadline) {
      return FieldError("round_seconds", absl::StrCat("must be below round_deadline_seconds (",
                                                      deadline, "), got ", spec.round_seconds()));
    }
  }
  if (spec.round_grace_seconds() != 0) {
    LOCALSGD_RETURN_IF_ERROR(CheckRange("round_grace_seconds", spec.round_grace_seconds(), 0,
                                        deadline, /*lo_open=*/true, /*hi_open=*/true));
  }
  if (spec.has_round_quorum_fraction()) {
    LOCALSGD_RETURN_IF_ERROR(
        CheckRange("round_quorum_fraction", spec.round_quorum_fraction(), 0, 1, /*lo_open=*/true));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsBuiltinModel(absl::string_view name) {
  for (absl::string_view known : kBuiltinModels) {
    if (name == known) return true;
  }
  return false;
}

std::string BuiltinModelList() { return absl::StrJoin(kBuiltinModels, ", "); }

std::string ModelName(const v1::ModelSpec& model) {
  switch (model.source_case()) {
    case v1::ModelSpec::kBuiltin:
      return model.builtin();
    case v1::ModelSpec::kTorchscriptPath:
      return model.torchscript_path();
    case v1::ModelSpec::kCustom:
      return absl::StrCat(model.custom(), " (custom)");
    case v1::ModelSpec::SOURCE_NOT_SET:
      break;
  }
  return "";
}

absl::StatusOr<v1::RunSpec> ParseRunSpecText(absl::string_view text) {
  v1::RunSpec spec;
  ErrorCollector errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &spec)) {
    return absl::InvalidArgumentError(absl::StrCat("run spec text: ", errors.first()));
  }
  return spec;
}

absl::Status ValidateRunSpec(const v1::RunSpec& spec) {
  LOCALSGD_RETURN_IF_ERROR(CheckName("name", spec.name(), /*required=*/false));
  if (spec.name().size() > 128) return FieldError("name", "longer than 128 bytes");
  LOCALSGD_RETURN_IF_ERROR(ValidateModel(spec));
  LOCALSGD_RETURN_IF_ERROR(ValidateDataset(spec.dataset()));
  const int local_sgd_steps =
      spec.has_local_sgd_steps() ? spec.local_sgd_steps() : kDefaultLocalSgdSteps;
  LOCALSGD_RETURN_IF_ERROR(RoundSchedule::Make(local_sgd_steps, spec.overlap_steps(),
                                               spec.fragments() == 0 ? 1 : spec.fragments())
                               .status());
  if (spec.has_max_unsynced_steps() && spec.max_unsynced_steps() != 0) {
    LOCALSGD_RETURN_IF_ERROR(
        CheckInt("max_unsynced_steps", spec.max_unsynced_steps(), local_sgd_steps, 1'000'000'000));
  }
  if (spec.has_checkpoint_every_rounds()) {
    LOCALSGD_RETURN_IF_ERROR(
        CheckInt("checkpoint_every_rounds", spec.checkpoint_every_rounds(), 1, 1'000'000'000));
  }
  if (spec.has_checkpoint_share()) {
    LOCALSGD_RETURN_IF_ERROR(
        CheckRange("checkpoint_share", spec.checkpoint_share(), 0, 1, /*lo_open=*/true));
  }
  if (spec.has_gradient_accumulation_steps()) {
    LOCALSGD_RETURN_IF_ERROR(
        CheckInt("gradient_accumulation_steps", spec.gradient_accumulation_steps(), 1, 10'000));
  }
  LOCALSGD_RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer()));
  if (spec.has_batch_size()) {
    LOCALSGD_RETURN_IF_ERROR(CheckInt("batch_size", spec.batch_size(), 1, kMaxBatchSize));
  }
  switch (spec.duration_case()) {
    case v1::RunSpec::kTotalSteps:
      LOCALSGD_RETURN_IF_ERROR(CheckInt("total_steps", spec.total_steps(), 1, int64_t{1} << 40));
      break;
    case v1::RunSpec::kEpochs:
      LOCALSGD_RETURN_IF_ERROR(CheckRange("epochs", spec.epochs(), 0, 1e6, /*lo_open=*/true));
      break;
    case v1::RunSpec::DURATION_NOT_SET:
      break;
  }
  double peak_lr = spec.optimizer().has_lr()                             ? spec.optimizer().lr()
                   : spec.optimizer().kind() == v1::OPTIMIZER_KIND_ADAMW ? kDefaultAdamWLr
                                                                         : kDefaultSgdLr;
  LOCALSGD_RETURN_IF_ERROR(ValidateSchedule(spec, peak_lr));
  if (spec.has_min_workers()) {
    LOCALSGD_RETURN_IF_ERROR(CheckInt("min_workers", spec.min_workers(), 1, kMaxWorkers));
  }
  if (spec.has_round_deadline_seconds()) {
    LOCALSGD_RETURN_IF_ERROR(CheckRange("round_deadline_seconds", spec.round_deadline_seconds(), 0,
                                        kMaxSeconds, /*lo_open=*/true));
  }
  LOCALSGD_RETURN_IF_ERROR(ValidatePacing(spec));
  if (spec.has_max_delta_norm_ratio() && spec.max_delta_norm_ratio() != 0) {
    LOCALSGD_RETURN_IF_ERROR(
        CheckRange("max_delta_norm_ratio", spec.max_delta_norm_ratio(), 1, 1e9, /*lo_open=*/true));
  }
  if (spec.has_trimmed_mean_fraction() && spec.trimmed_mean_fraction() != 0) {
    LOCALSGD_RETURN_IF_ERROR(CheckRange("trimmed_mean_fraction", spec.trimmed_mean_fraction(), 0,
                                        0.5, /*lo_open=*/true, /*hi_open=*/true));
  }
  if (spec.has_suspend_after_failed_rounds()) {
    LOCALSGD_RETURN_IF_ERROR(
        CheckInt("suspend_after_failed_rounds", spec.suspend_after_failed_rounds(), 0, 1000));
  }
  if (spec.has_quorum_timeout_seconds()) {
    LOCALSGD_RETURN_IF_ERROR(CheckRange("quorum_timeout_seconds", spec.quorum_timeout_seconds(), 0,
                                        kMaxSeconds, /*lo_open=*/true));
  }
  if (!v1::Codec_IsValid(spec.codec())) {
    return FieldError("codec", absl::StrCat("unknown codec ", spec.codec(),
                                            " (known: CODEC_FP32, CODEC_BF16, CODEC_FP16, "
                                            "CODEC_INT8)"));
  }
  if (spec.has_chunk_bytes()) {
    LOCALSGD_RETURN_IF_ERROR(
        CheckInt("chunk_bytes", spec.chunk_bytes(), kMinChunkBytes, kMaxChunkBytes));
  }
  if (spec.ring_streams() != 0) {
    LOCALSGD_RETURN_IF_ERROR(CheckInt("ring_streams", spec.ring_streams(), 1, kMaxRingStreams));
  }
  if (spec.has_min_shard_bytes()) {
    LOCALSGD_RETURN_IF_ERROR(
        CheckInt("min_shard_bytes", spec.min_shard_bytes(), 0, kMaxMinShardBytes));
  }
  const v1::OuterOptimizerSpec& outer = spec.outer_optimizer();
  if (outer.has_lr()) {
    LOCALSGD_RETURN_IF_ERROR(CheckRange("outer_optimizer.lr", outer.lr(), 0, 10, /*lo_open=*/true));
  }
  LOCALSGD_RETURN_IF_ERROR(CheckMomentum("outer_optimizer", outer.momentum(), outer.nesterov()));
  if (!v1::LossKind_IsValid(spec.loss())) {
    return FieldError("loss", absl::StrCat("unknown loss ", spec.loss()));
  }
  LOCALSGD_RETURN_IF_ERROR(
      CheckInt("eval_every_rounds", spec.eval_every_rounds(), 0, 1'000'000'000));
  if (!v1::Exchange_IsValid(spec.exchange())) {
    return FieldError("exchange", absl::StrCat("unknown exchange ", spec.exchange(),
                                               " (known: EXCHANGE_SHARDED, EXCHANGE_STAR)"));
  }
  return absl::OkStatus();
}

v1::RunSpec WithDefaults(const v1::RunSpec& spec) {
  v1::RunSpec out = spec;
  v1::DatasetSpec& dataset = *out.mutable_dataset();
  if (dataset.kind() == v1::DATASET_KIND_UNSPECIFIED) dataset.set_kind(v1::DATASET_KIND_SYNTHETIC);
  if (dataset.kind() == v1::DATASET_KIND_SYNTHETIC && !dataset.has_synthetic_samples()) {
    dataset.set_synthetic_samples(kDefaultSyntheticSamples);
  }
  if (!out.has_local_sgd_steps()) out.set_local_sgd_steps(kDefaultLocalSgdSteps);
  if (!out.has_gradient_accumulation_steps()) out.set_gradient_accumulation_steps(1);
  if (!out.has_enabled()) out.set_enabled(true);
  v1::OptimizerSpec& opt = *out.mutable_optimizer();
  if (opt.kind() == v1::OPTIMIZER_KIND_UNSPECIFIED) opt.set_kind(v1::OPTIMIZER_KIND_SGD);
  if (!opt.has_lr()) {
    opt.set_lr(opt.kind() == v1::OPTIMIZER_KIND_ADAMW ? kDefaultAdamWLr : kDefaultSgdLr);
  }
  if (opt.kind() == v1::OPTIMIZER_KIND_ADAMW) {
    if (!opt.has_beta1()) opt.set_beta1(0.9);
    if (!opt.has_beta2()) opt.set_beta2(0.999);
    if (!opt.has_eps()) opt.set_eps(1e-8);
  }
  v1::LrScheduleSpec& schedule = *out.mutable_lr_schedule();
  if (schedule.kind() == v1::LR_SCHEDULE_KIND_UNSPECIFIED) {
    schedule.set_kind(v1::LR_SCHEDULE_KIND_CONSTANT);
  }
  if (!out.has_batch_size()) out.set_batch_size(kDefaultBatchSize);
  if (out.duration_case() == v1::RunSpec::DURATION_NOT_SET) out.set_total_steps(kDefaultTotalSteps);
  if (!out.has_min_workers()) out.set_min_workers(1);
  if (!out.has_round_deadline_seconds())
    out.set_round_deadline_seconds(kDefaultRoundDeadlineSeconds);
  if (!out.has_quorum_timeout_seconds())
    out.set_quorum_timeout_seconds(kDefaultQuorumTimeoutSeconds);
  if (out.codec() == v1::CODEC_UNSPECIFIED) out.set_codec(v1::CODEC_FP32);
  if (!out.outer_optimizer().has_lr()) out.mutable_outer_optimizer()->set_lr(1.0);
  if (out.loss() == v1::LOSS_KIND_UNSPECIFIED) out.set_loss(v1::LOSS_KIND_CROSS_ENTROPY);
  if (!out.has_average_buffers()) out.set_average_buffers(true);
  if (out.exchange() == v1::EXCHANGE_UNSPECIFIED) out.set_exchange(v1::EXCHANGE_SHARDED);
  if (!out.has_chunk_bytes()) {
    out.set_chunk_bytes(out.exchange() == v1::EXCHANGE_STAR ? kDefaultStarChunkBytes
                                                            : kDefaultShardedChunkBytes);
  }
  if (!out.has_min_shard_bytes()) out.set_min_shard_bytes(kDefaultMinShardBytes);
  if (out.fragments() == 0) out.set_fragments(1);
  if (!out.has_max_unsynced_steps()) {
    out.set_max_unsynced_steps(int64_t{kDefaultUnsyncedRounds} * out.local_sgd_steps());
  }
  if (out.ring_streams() == 0) out.set_ring_streams(1);
  if (!out.has_checkpoint_every_rounds()) out.set_checkpoint_every_rounds(1);
  if (!out.has_checkpoint_share()) out.set_checkpoint_share(kDefaultCheckpointShare);
  if (!out.has_round_seconds()) out.set_round_seconds(0);
  if (!out.has_round_grace_seconds()) out.set_round_grace_seconds(0);
  if (!out.has_round_quorum_fraction()) out.set_round_quorum_fraction(kDefaultRoundQuorumFraction);
  if (!out.has_suspend_after_failed_rounds()) {
    out.set_suspend_after_failed_rounds(kDefaultSuspendAfterFailedRounds);
  }
  return out;
}

absl::StatusOr<v1::RunSpec> NormalizeRunSpec(const v1::RunSpec& spec) {
  LOCALSGD_RETURN_IF_ERROR(ValidateRunSpec(spec));
  return WithDefaults(spec);
}

bool CommitEndsRun(const v1::RunSpec& spec, int64_t synced_step) {
  return spec.duration_case() == v1::RunSpec::kTotalSteps && synced_step >= spec.total_steps();
}

}  // namespace localsgd
