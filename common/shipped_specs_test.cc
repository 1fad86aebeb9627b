// Every run spec shipped in deploy/specs/ parses and passes the coordinator's validation, so
// that what the README and the comments in those files promise is what StartRun accepts.
#include <google/protobuf/text_format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/run_spec.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(ShippedSpecsTest, EveryShippedSpecIsValid) {
  const std::filesystem::path folder = std::filesystem::path(std::getenv("TEST_SRCDIR")) /
                                       std::getenv("TEST_WORKSPACE") / "deploy" / "specs";
  int specs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().extension() != ".textproto") continue;
    ++specs;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    v1::RunSpec spec;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text.str(), &spec)) << entry.path();
    EXPECT_TRUE(ValidateRunSpec(spec).ok()) << entry.path() << ": " << ValidateRunSpec(spec);
  }
  EXPECT_GE(specs, 2);
}

}  // namespace
}  // namespace localsgd
