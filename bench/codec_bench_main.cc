// Codec throughput: Encode, EncodeDifference and Decode of every codec over one model-sized
// vector, and the round's digests (a member's NextChunkDigest with and without outer momentum,
// the coordinator's ChunkDigest of its stepped copy), against memcpy of the same fp32 bytes in
// the same run (a pass that reads and writes as many bytes as the fp32 codec does). Prints GB/s
// of fp32 values (4 bytes per value) and the time relative to memcpy; the median of --repeats
// passes.
//
//   bazel run -c opt //bench:codec_bench -- --values=25000000 --repeats=9
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "exchange/codec.h"
#include "exchange/model_digest.h"
#include "exchange/outer_step.h"
#include "proto/localsgd/v1/run_spec.pb.h"

ABSL_FLAG(int64_t, values, 25'000'000, "floats per pass (25 M = 100 MB of fp32)");
ABSL_FLAG(int, repeats, 9, "passes per figure; the median is printed");
ABSL_FLAG(int64_t, chunk_values, 32'768, "values per Encode/Decode call, as one chunk");

namespace {

// Median seconds of `repeats` runs of `pass`.
template <typename Pass>
double MedianSeconds(int repeats, Pass pass) {
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const absl::Time start = absl::Now();
    pass();
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::nth_element(seconds.begin(), seconds.begin() + repeats / 2, seconds.end());
  return seconds[static_cast<size_t>(repeats / 2)];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const size_t n = static_cast<size_t>(absl::GetFlag(FLAGS_values));
  const size_t chunk = static_cast<size_t>(absl::GetFlag(FLAGS_chunk_values));
  const int repeats = absl::GetFlag(FLAGS_repeats);
  std::vector<float> a(n), b(n), out(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) {
    a[i] = dist(rng);
    b[i] = a[i] + 0.01f * dist(rng);
  }
  const double gb = static_cast<double>(n) * sizeof(float) / 1e9;
  const double copy = MedianSeconds(repeats, [&] {
    for (size_t begin = 0; begin < n; begin += chunk) {
      const size_t len = std::min(chunk, n - begin);
      std::memcpy(out.data() + begin, a.data() + begin, len * sizeof(float));
    }
  });
  std::printf("%-6s %-17s %8s %8s %10s\n", "codec", "operation", "ms", "GB/s", "vs memcpy");
  std::printf("%-6s %-17s %8.1f %8.2f %10.2f\n", "-", "memcpy", copy * 1e3, gb / copy, 1.0);
  for (localsgd::v1::Codec codec : {localsgd::v1::CODEC_FP32, localsgd::v1::CODEC_BF16,
                                    localsgd::v1::CODEC_FP16, localsgd::v1::CODEC_INT8}) {
    std::vector<std::string> encoded((n + chunk - 1) / chunk);
    auto chunks = [&](auto body) {
      for (size_t begin = 0, c = 0; begin < n; begin += chunk, ++c) {
        body(c, begin, std::min(chunk, n - begin));
      }
    };
    const double encode = MedianSeconds(repeats, [&] {
      chunks([&](size_t c, size_t begin, size_t len) {
        localsgd::Encode(codec, absl::MakeConstSpan(a.data() + begin, len), &encoded[c]);
      });
    });
    const double difference = MedianSeconds(repeats, [&] {
      chunks([&](size_t c, size_t begin, size_t len) {
        localsgd::EncodeDifference(codec, absl::MakeConstSpan(a.data() + begin, len),
                                   absl::MakeConstSpan(b.data() + begin, len), &encoded[c]);
      });
    });
    bool ok = true;
    const double decode = MedianSeconds(repeats, [&] {
      chunks([&](size_t c, size_t begin, size_t len) {
        ok &= localsgd::Decode(codec, encoded[c], absl::MakeSpan(out.data() + begin, len)).ok();
      });
    });
    if (!ok) {
      std::fprintf(stderr, "decode failed for %s\n", localsgd::CodecName(codec).c_str());
      return 1;
    }
    const std::string name = localsgd::CodecName(codec);
    for (const auto& [op, s] : {std::pair<const char*, double>{"Encode", encode},
                                {"EncodeDifference", difference},
                                {"Decode", decode}}) {
      std::printf("%-6s %-17s %8.1f %8.2f %10.2f\n", name.c_str(), op, s * 1e3, gb / s, s / copy);
    }
  }
  // The digests a sharded round takes of every chunk (docs/design.md, "Digests").
  uint64_t sink = 0;
  auto digest_pass = [&](auto digest) {
    return MedianSeconds(repeats, [&] {
      for (size_t begin = 0; begin < n; begin += chunk) {
        const size_t len = std::min(chunk, n - begin);
        sink ^= digest(begin, len).with_momentum;
      }
    });
  };
  const double stepped = digest_pass([&](size_t begin, size_t len) {
    return localsgd::ChunkDigest(absl::MakeConstSpan(a.data() + begin, len), {});
  });
  const double next_plain = digest_pass([&](size_t begin, size_t len) {
    return localsgd::NextChunkDigest(localsgd::OuterOptimizer{},
                                     absl::MakeConstSpan(b.data() + begin, len),
                                     absl::MakeConstSpan(a.data() + begin, len), {})
        .value_or(localsgd::kNotFinite);
  });
  const double next_diloco = digest_pass([&](size_t begin, size_t len) {
    return localsgd::NextChunkDigest(localsgd::OuterOptimizer{0.7, 0.9, true},
                                     absl::MakeConstSpan(b.data() + begin, len),
                                     absl::MakeConstSpan(a.data() + begin, len),
                                     absl::MakeConstSpan(out.data() + begin, len))
        .value_or(localsgd::kNotFinite);
  });
  for (const auto& [op, s] : {std::pair<const char*, double>{"ChunkDigest", stepped},
                              {"NextChunkDigest", next_plain},
                              {"NextDigest+mom", next_diloco}}) {
    std::printf("%-6s %-17s %8.1f %8.2f %10.2f\n", "digest", op, s * 1e3, gb / s, s / copy);
  }
  return sink == 42 ? 2 : 0;  // keeps the digests from being optimised away
}
