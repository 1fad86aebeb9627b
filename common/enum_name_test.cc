#include "common/enum_name.h"

#include "gtest/gtest.h"
#include "proto/localsgd/v1/coordinator.pb.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {
namespace {

TEST(EnumNameTest, DropsTheEnumsPrefix) {
  EXPECT_EQ(EnumName(v1::RUN_STATE_WAITING_FOR_WORKERS), "WAITING_FOR_WORKERS");
  EXPECT_EQ(EnumName(v1::CODEC_FP32), "FP32");
  EXPECT_EQ(EnumName(v1::EXCHANGE_SHARDED), "SHARDED");
  EXPECT_EQ(EnumName(v1::ROUND_OUTCOME_ABORTED), "ABORTED");
  EXPECT_EQ(EnumName(v1::EVENT_SEVERITY_ERROR), "ERROR");
  EXPECT_EQ(EnumName(v1::DATASET_KIND_FASHION_MNIST), "FASHION_MNIST");
}

TEST(EnumNameTest, NamesAnUnknownNumber) {
  EXPECT_EQ(EnumName(static_cast<v1::RunState>(77)), "UNKNOWN_77");
}

TEST(EnumNameTest, PrefixFromTheTypeName) {
  EXPECT_EQ(EnumValuePrefix("RunState"), "RUN_STATE_");
  EXPECT_EQ(EnumValuePrefix("Codec"), "CODEC_");
}

}  // namespace
}  // namespace localsgd
