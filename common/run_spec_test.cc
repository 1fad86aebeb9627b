#include "common/run_spec.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

v1::RunSpec Parse(const std::string& text) {
  auto spec = ParseRunSpecText(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::RunSpec();
}

TEST(RunSpecTest, ParsesTextFormat) {
  v1::RunSpec spec = Parse(R"pb(
    name: "fmnist"
    model { builtin: "cnn" }
    dataset { kind: DATASET_KIND_FASHION_MNIST path: "/data" }
    local_sgd_steps: 8
    gradient_accumulation_steps: 2
    optimizer { kind: OPTIMIZER_KIND_SGD lr: 0.1 momentum: 0.9 nesterov: true }
    total_steps: 500
    codec: CODEC_INT8
    outer_optimizer { lr: 0.7 momentum: 0.9 nesterov: true }
  )pb");
  EXPECT_EQ(spec.model().builtin(), "cnn");
  EXPECT_EQ(spec.local_sgd_steps(), 8);
  EXPECT_EQ(spec.codec(), v1::CODEC_INT8);
  EXPECT_TRUE(ValidateRunSpec(spec).ok()) << ValidateRunSpec(spec);
}

TEST(RunSpecTest, ParseErrorsNameTheLine) {
  auto spec = ParseRunSpecText("model { builtin: \"mlp\" }\nlocal_sgd_stepz: 3\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("line 2"), std::string::npos) << spec.status();
  EXPECT_FALSE(ParseRunSpecText("codec: CODEC_ZIP").ok());
}

TEST(RunSpecTest, DefaultsAreFilledIn) {
  auto spec = NormalizeRunSpec(Parse("model { builtin: \"mlp\" }"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->local_sgd_steps(), 8);
  EXPECT_EQ(spec->gradient_accumulation_steps(), 1);
  EXPECT_TRUE(spec->enabled());
  EXPECT_EQ(spec->dataset().kind(), v1::DATASET_KIND_SYNTHETIC);
  EXPECT_EQ(spec->optimizer().kind(), v1::OPTIMIZER_KIND_SGD);
  EXPECT_DOUBLE_EQ(spec->optimizer().lr(), 0.05);
  EXPECT_EQ(spec->batch_size(), 64);
  EXPECT_EQ(spec->total_steps(), 1000);
  EXPECT_EQ(spec->min_workers(), 1);
  EXPECT_EQ(spec->codec(), v1::CODEC_FP32);
  EXPECT_EQ(spec->chunk_bytes(), 128 << 10);  // the sharded exchange's default
  EXPECT_EQ(spec->min_shard_bytes(), 1 << 20);
  EXPECT_DOUBLE_EQ(spec->outer_optimizer().lr(), 1.0);
  EXPECT_TRUE(spec->average_buffers());
  EXPECT_EQ(spec->exchange(), v1::EXCHANGE_SHARDED);
  EXPECT_EQ(spec->max_unsynced_steps(), 32);  // four rounds of local_sgd_steps
  EXPECT_EQ(spec->checkpoint_every_rounds(), 1);
  EXPECT_DOUBLE_EQ(spec->checkpoint_share(), 0.05);
  // Defaults are a fixed point: normalising twice changes nothing.
  auto again = NormalizeRunSpec(*spec);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->SerializeAsString(), spec->SerializeAsString());
}

TEST(RunSpecTest, TheDefaultChunkDependsOnTheExchangeAndAGivenOneIsKept) {
  auto star = NormalizeRunSpec(Parse("model { builtin: \"mlp\" } exchange: EXCHANGE_STAR"));
  ASSERT_TRUE(star.ok()) << star.status();
  EXPECT_EQ(star->chunk_bytes(), 1 << 20);
  auto given = NormalizeRunSpec(Parse("model { builtin: \"mlp\" } chunk_bytes: 65536"));
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->chunk_bytes(), 65536);
  auto no_minimum = NormalizeRunSpec(Parse("model { builtin: \"mlp\" } min_shard_bytes: 0"));
  ASSERT_TRUE(no_minimum.ok()) << no_minimum.status();
  EXPECT_EQ(no_minimum->min_shard_bytes(), 0);
}

// Issue 37, finding 4: screening was refused in sharded mode, the default.
TEST(RunSpecTest, RobustAggregationWorksInBothExchanges) {
  for (const char* text : {"max_delta_norm_ratio: 3", "trimmed_mean_fraction: 0.34",
                           "exchange: EXCHANGE_SHARDED max_delta_norm_ratio: 3",
                           "exchange: EXCHANGE_STAR trimmed_mean_fraction: 0.25"}) {
    auto spec = NormalizeRunSpec(Parse(absl::StrCat("model { builtin: \"mlp\" } ", text)));
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    EXPECT_EQ(spec->exchange(),
              absl::StrContains(text, "STAR") ? v1::EXCHANGE_STAR : v1::EXCHANGE_SHARDED)
        << text;
  }
}

TEST(RunSpecTest, ExplicitValuesAreKept) {
  auto spec = NormalizeRunSpec(Parse(R"pb(
    model { builtin: "mlp" }
    enabled: false
    epochs: 2.5
    optimizer { kind: OPTIMIZER_KIND_ADAMW }
  )pb"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->enabled());
  EXPECT_DOUBLE_EQ(spec->epochs(), 2.5);
  EXPECT_FALSE(spec->has_total_steps());
  EXPECT_DOUBLE_EQ(spec->optimizer().lr(), 1e-3);
  EXPECT_DOUBLE_EQ(spec->optimizer().beta2(), 0.999);
  // No bound on training alone, asked for, stays so.
  auto unbounded = NormalizeRunSpec(Parse("model { builtin: \"mlp\" } max_unsynced_steps: 0"));
  ASSERT_TRUE(unbounded.ok()) << unbounded.status();
  EXPECT_EQ(unbounded->max_unsynced_steps(), 0);
}

struct BadCase {
  const char* text;
  const char* field;
};

TEST(RunSpecTest, EveryBadFieldIsNamed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<BadCase> cases = {
      {"", "spec.model:"},
      {"model {}", "spec.model:"},
      {"model { builtin: \"resnet\" }", "spec.model.builtin:"},
      {"model { torchscript_path: \"\" }", "spec.model"},
      {"model { builtin: \"mlp\" } dataset { kind: DATASET_KIND_MNIST }", "spec.dataset.path:"},
      {"model { builtin: \"mlp\" } dataset { kind: 99 }", "spec.dataset.kind:"},
      {"model { builtin: \"mlp\" } dataset { synthetic_samples: 0 }",
       "spec.dataset.synthetic_samples:"},
      {"model { builtin: \"mlp\" } local_sgd_steps: 0", "spec.local_sgd_steps:"},
      {"model { builtin: \"mlp\" } local_sgd_steps: -3", "spec.local_sgd_steps:"},
      {"model { builtin: \"mlp\" } gradient_accumulation_steps: 0",
       "spec.gradient_accumulation_steps:"},
      {"model { builtin: \"mlp\" } optimizer { lr: -0.1 }", "spec.optimizer.lr:"},
      {"model { builtin: \"mlp\" } optimizer { lr: 0 }", "spec.optimizer.lr:"},
      {"model { builtin: \"mlp\" } optimizer { momentum: 1.0 }", "spec.optimizer.momentum:"},
      {"model { builtin: \"mlp\" } optimizer { nesterov: true }", "spec.optimizer.nesterov:"},
      {"model { builtin: \"mlp\" } optimizer { weight_decay: -1 }", "spec.optimizer.weight_decay:"},
      {"model { builtin: \"mlp\" } optimizer { kind: 7 }", "spec.optimizer.kind:"},
      {"model { builtin: \"mlp\" } optimizer { eps: 0 }", "spec.optimizer.eps:"},
      {"model { builtin: \"mlp\" } batch_size: 0", "spec.batch_size:"},
      {"model { builtin: \"mlp\" } batch_size: 1000000", "spec.batch_size:"},
      {"model { builtin: \"mlp\" } total_steps: 0", "spec.total_steps:"},
      {"model { builtin: \"mlp\" } epochs: -1", "spec.epochs:"},
      {"model { builtin: \"mlp\" } min_workers: 0", "spec.min_workers:"},
      {"model { builtin: \"mlp\" } round_deadline_seconds: 0", "spec.round_deadline_seconds:"},
      {"model { builtin: \"mlp\" } max_delta_norm_ratio: 0.5", "spec.max_delta_norm_ratio:"},
      {"model { builtin: \"mlp\" } quorum_timeout_seconds: -5", "spec.quorum_timeout_seconds:"},
      {"model { builtin: \"mlp\" } codec: 42", "spec.codec:"},
      {"model { builtin: \"mlp\" } chunk_bytes: 10", "spec.chunk_bytes:"},
      {"model { builtin: \"mlp\" } min_shard_bytes: -1", "spec.min_shard_bytes:"},
      {"model { builtin: \"mlp\" } min_shard_bytes: 2000000000", "spec.min_shard_bytes:"},
      {"model { builtin: \"mlp\" } outer_optimizer { lr: 0 }", "spec.outer_optimizer.lr:"},
      {"model { builtin: \"mlp\" } outer_optimizer { momentum: -0.1 }",
       "spec.outer_optimizer.momentum:"},
      {"model { builtin: \"mlp\" } outer_optimizer { nesterov: true }",
       "spec.outer_optimizer.nesterov:"},
      {"model { builtin: \"mlp\" } loss: 9", "spec.loss:"},
      {"model { builtin: \"mlp\" } eval_every_rounds: -1", "spec.eval_every_rounds:"},
      {"model { builtin: \"mlp\" } total_steps: 10 lr_schedule { warmup_steps: 11 }",
       "spec.lr_schedule.warmup_steps:"},
      {"model { builtin: \"mlp\" } optimizer { lr: 0.1 } lr_schedule { min_lr: 0.2 }",
       "spec.lr_schedule.min_lr:"},
      {"model { builtin: \"mlp\" } lr_schedule { kind: 12 }", "spec.lr_schedule.kind:"},
      {"model { builtin: \"mlp\" } name: \"a\\nb\"", "spec.name:"},
      {"model { builtin: \"mlp\" } exchange: 5", "spec.exchange:"},
      {"model { builtin: \"mlp\" } trimmed_mean_fraction: 0.5", "spec.trimmed_mean_fraction:"},
      {"model { builtin: \"mlp\" } trimmed_mean_fraction: -0.1", "spec.trimmed_mean_fraction:"},
      {"model { builtin: \"mlp\" } overlap_steps: -1", "spec.overlap_steps:"},
      {"model { builtin: \"mlp\" } overlap_steps: 8", "spec.overlap_steps:"},
      {"model { builtin: \"mlp\" } local_sgd_steps: 4 overlap_steps: 4", "spec.overlap_steps:"},
      {"model { builtin: \"mlp\" } fragments: -1", "spec.fragments:"},
      {"model { builtin: \"mlp\" } ring_streams: 9", "spec.ring_streams:"},
      {"model { builtin: \"mlp\" } ring_streams: -1", "spec.ring_streams:"},
      {"model { builtin: \"mlp\" } max_unsynced_steps: -1", "spec.max_unsynced_steps:"},
      {"model { builtin: \"mlp\" } max_unsynced_steps: 7", "spec.max_unsynced_steps:"},
      {"model { builtin: \"mlp\" } max_unsynced_steps: 1000000001", "spec.max_unsynced_steps:"},
      {"model { builtin: \"mlp\" } checkpoint_every_rounds: 0", "spec.checkpoint_every_rounds:"},
      {"model { builtin: \"mlp\" } checkpoint_share: 0", "spec.checkpoint_share:"},
      {"model { builtin: \"mlp\" } checkpoint_share: 1.5", "spec.checkpoint_share:"},
      {"model { builtin: \"mlp\" } checkpoint_share: nan", "spec.checkpoint_share:"},
      {"model { builtin: \"mlp\" } local_sgd_steps: 128 fragments: 65", "spec.fragments:"},
      {"model { builtin: \"mlp\" } local_sgd_steps: 8 fragments: 3", "spec.fragments:"},
      {"model { builtin: \"mlp\" } local_sgd_steps: 8 fragments: 4 overlap_steps: 2",
       "spec.overlap_steps:"},
  };
  for (const BadCase& c : cases) {
    absl::Status status = ValidateRunSpec(Parse(c.text));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(status.message().find(c.field), 0u) << c.text << " -> " << status;
  }
  v1::RunSpec with_nan = Parse("model { builtin: \"mlp\" }");
  with_nan.mutable_optimizer()->set_lr(nan);
  EXPECT_EQ(ValidateRunSpec(with_nan).message().find("spec.optimizer.lr:"), 0u);
  v1::RunSpec with_inf = Parse("model { builtin: \"mlp\" }");
  with_inf.set_round_deadline_seconds(std::numeric_limits<double>::infinity());
  EXPECT_EQ(ValidateRunSpec(with_inf).message().find("spec.round_deadline_seconds:"), 0u);
}

}  // namespace
}  // namespace localsgd
