#ifndef LOCALSGD_TESTS_TESTUTIL_RANDOM_VECTOR_H_
#define LOCALSGD_TESTS_TESTUTIL_RANDOM_VECTOR_H_

#include <cstdint>
#include <random>
#include <vector>

namespace localsgd::testing {

// n floats drawn from N(0, stddev^2), the same for the same seed.
inline std::vector<float> RandomVector(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace localsgd::testing

#endif  // LOCALSGD_TESTS_TESTUTIL_RANDOM_VECTOR_H_
