#include "common/model_store.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "common/file_util.h"
#include "gtest/gtest.h"
#include "tests/testutil/random_vector.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::RandomVector;
using ::localsgd::testing::StatusIs;

std::string Dir(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(ModelStoreTest, NothingSavedIsNullopt) {
  auto store = ModelStore::Open(Dir("empty"));
  ASSERT_THAT(store, IsOk());
  auto loaded = store->Load();
  ASSERT_THAT(loaded, IsOk());
  EXPECT_FALSE(loaded->has_value());
}

TEST(ModelStoreTest, SaveThenLoadIsBitIdentical) {
  auto store = ModelStore::Open(Dir("saved"));
  ASSERT_THAT(store, IsOk());
  const std::vector<float> global = RandomVector(100003, 1);
  const std::vector<float> momentum = RandomVector(100003, 2);
  ASSERT_THAT(store->Save("run-1", 4, 32, global, momentum), IsOk());
  ASSERT_THAT(store->Save("run-1", 5, 40, global, {}), IsOk());  // the newest one counts
  auto loaded = ModelStore::Open(Dir("saved"))->Load();
  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  const ModelCheckpoint& checkpoint = **loaded;
  EXPECT_EQ(checkpoint.run_id, "run-1");
  EXPECT_EQ(checkpoint.round, 5);
  EXPECT_EQ(checkpoint.global_step, 40);
  EXPECT_EQ(checkpoint.global, global);
  EXPECT_TRUE(checkpoint.momentum.empty());
}

absl::string_view Bytes(const float* values, size_t n) {
  return absl::string_view(reinterpret_cast<const char*>(values), n * sizeof(float));
}

// A save in pieces is the same file as a save of whole buffers, and one given the pieces out of
// order, or too few of them, leaves the saved model as it was.
TEST(ModelStoreTest, ASaveInPiecesLoadsAsTheWholeModel) {
  auto store = ModelStore::Open(Dir("pieces"));
  ASSERT_THAT(store, IsOk());
  const std::vector<float> global = RandomVector(1001, 3);
  const std::vector<float> momentum = RandomVector(1001, 4);
  {
    auto writer = store->Begin("run-2", 3, 24, global.size(), momentum.size());
    ASSERT_THAT(writer, IsOk());
    for (size_t i = 0; i < global.size(); i += 300) {
      ASSERT_THAT(writer->AppendGlobal(Bytes(&global[i], std::min<size_t>(300, global.size() - i))),
                  IsOk());
    }
    ASSERT_THAT(writer->AppendMomentum(Bytes(momentum.data(), 1)), IsOk());
    ASSERT_THAT(writer->AppendMomentum(Bytes(&momentum[1], momentum.size() - 1)), IsOk());
    ASSERT_THAT(writer->Commit(), IsOk());
  }
  {
    auto writer = store->Begin("run-2", 4, 32, global.size(), momentum.size());
    ASSERT_THAT(writer, IsOk());
    EXPECT_THAT(writer->AppendMomentum(Bytes(momentum.data(), 1)),
                StatusIs(absl::StatusCode::kInvalidArgument, "before all of the model"));
    ASSERT_THAT(writer->AppendGlobal(Bytes(global.data(), global.size())), IsOk());
    EXPECT_THAT(writer->AppendGlobal(Bytes(global.data(), 1)),
                StatusIs(absl::StatusCode::kInvalidArgument, "more of the model"));
    EXPECT_THAT(writer->Commit(), StatusIs(absl::StatusCode::kInvalidArgument, "bytes"));
  }
  auto loaded = store->Load();
  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->round, 3);
  EXPECT_EQ((*loaded)->global_step, 24);
  EXPECT_EQ((*loaded)->global, global);
  EXPECT_EQ((*loaded)->momentum, momentum);
}

// Peek reads the label alone: a file truncated after it still tells its round, which Load
// refuses.
TEST(ModelStoreTest, PeekReadsTheLabelAlone) {
  auto store = ModelStore::Open(Dir("peek"));
  ASSERT_THAT(store, IsOk());
  auto none = store->Peek();
  ASSERT_THAT(none, IsOk());
  EXPECT_FALSE(none->has_value());
  ASSERT_THAT(store->Save("run-7", 12, 96, RandomVector(5000, 5), RandomVector(5000, 6)), IsOk());
  auto label = store->Peek();
  ASSERT_THAT(label, IsOk());
  ASSERT_TRUE(label->has_value());
  EXPECT_EQ((*label)->run_id, "run-7");
  EXPECT_EQ((*label)->round, 12);
  EXPECT_EQ((*label)->global_step, 96);
  const std::string bytes = *ReadFile(store->path(), 1 << 20);
  ASSERT_THAT(WriteFileAtomically(store->path(), bytes.substr(0, 200)), IsOk());
  EXPECT_EQ((*store->Peek())->round, 12);
  EXPECT_THAT(store->Load(), StatusIs(absl::StatusCode::kDataLoss, "truncated"));
  ASSERT_THAT(WriteFileAtomically(store->path(), "no header"), IsOk());
  EXPECT_THAT(store->Peek(), StatusIs(absl::StatusCode::kDataLoss, "peek"));
}

TEST(ModelStoreTest, TruncatedOrAlteredCheckpointIsDataLoss) {
  auto store = ModelStore::Open(Dir("damaged"));
  ASSERT_THAT(store, IsOk());
  ASSERT_THAT(store->Save("run-1", 3, 24, RandomVector(1000, 3), RandomVector(1000, 4)), IsOk());
  const std::string good = *ReadFile(store->path(), 1 << 30);

  ASSERT_THAT(WriteFileAtomically(store->path(), good.substr(0, good.size() / 2)), IsOk());
  EXPECT_THAT(store->Load(), StatusIs(absl::StatusCode::kDataLoss, "model.bin"));

  std::string flipped = good;
  flipped[good.size() - 100] ^= 0x40;  // one bit of one parameter
  ASSERT_THAT(WriteFileAtomically(store->path(), flipped), IsOk());
  EXPECT_THAT(store->Load(), StatusIs(absl::StatusCode::kDataLoss, "checksum"));

  ASSERT_THAT(WriteChecksummedFile(store->path(), "\xff\xff not a proto"), IsOk());
  EXPECT_THAT(store->Load(), StatusIs(absl::StatusCode::kDataLoss, "not a SavedModel"));
}

// Issue 50, finding 8: a state folder whose model.bin holds NaN (written with a valid
// checksum) was accepted, and every member would have trained from it.
TEST(ModelStoreTest, ANonFiniteValueIsDataLoss) {
  auto store = ModelStore::Open(Dir("nan"));
  ASSERT_THAT(store, IsOk());
  std::vector<float> global = RandomVector(1000, 3);
  global[17] = std::nanf("");
  ASSERT_THAT(store->Save("run-1", 3, 24, global, {}), IsOk());
  EXPECT_THAT(store->Load(), StatusIs(absl::StatusCode::kDataLoss, "value 17 of the model is nan"));
  std::vector<float> momentum(1000, 0.0f);
  momentum[5] = INFINITY;
  ASSERT_THAT(store->Save("run-1", 3, 24, RandomVector(1000, 3), momentum), IsOk());
  EXPECT_THAT(store->Load(),
              StatusIs(absl::StatusCode::kDataLoss, "value 5 of the momentum is inf"));
}

}  // namespace
}  // namespace localsgd
