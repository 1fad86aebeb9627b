#include "exchange/outer_step.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "exchange/float_bits.h"

namespace localsgd {
namespace {

// The loops take raw, non-aliasing pointers and spell out OuterUpdate's three cases (the same
// operations in the same order, so the results are bit-identical to it): Span's checked
// indexing and a possible overlap of the spans kept GCC from vectorising them, and a model-sized
// step is a pass over the whole vector at every commit.
template <bool kMomentum, bool kNesterov>
uint32_t StepInto(float lr, float mu, float* __restrict mean_then_next,
                  const float* __restrict global, const float* __restrict momentum,
                  float* __restrict next_momentum, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float mean = mean_then_next[i];
    float update;
    if constexpr (!kMomentum) {
      update = lr * mean;
    } else {
      const float m = mu * momentum[i] + mean;
      next_momentum[i] = m;
      update = kNesterov ? lr * (mean + mu * m) : lr * m;
    }
    const float next = global[i] + update;
    mean_then_next[i] = next;
    bad |= NotFinite(next);
  }
  return bad;
}

template <bool kMomentum, bool kNesterov>
void StepInPlace(float lr, float mu, const float* __restrict mean, float* __restrict global,
                 float* __restrict momentum, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float update;
    if constexpr (!kMomentum) {
      update = lr * mean[i];
    } else {
      const float m = mu * momentum[i] + mean[i];
      momentum[i] = m;
      update = kNesterov ? lr * (mean[i] + mu * m) : lr * m;
    }
    global[i] = global[i] + update;
  }
}

// The loops index raw pointers: spans of other lengths than `global` are a caller's bug, and
// stop the process here rather than read or write past a buffer.
void CheckLengths(const OuterOptimizer& outer, size_t n, size_t mean, size_t momentum,
                  size_t next_momentum) {
  if (mean != n || (outer.momentum != 0 && (momentum != n || next_momentum != n))) {
    std::fprintf(stderr, "outer step: spans of %zu values (mean %zu, momentum %zu, %zu)\n", n, mean,
                 momentum, next_momentum);
    std::abort();
  }
}

}  // namespace

bool OuterStepInto(const OuterOptimizer& outer, absl::Span<float> mean_then_next,
                   absl::Span<const float> global, absl::Span<const float> momentum,
                   absl::Span<float> next_momentum) {
  const float lr = static_cast<float>(outer.lr);
  const float mu = static_cast<float>(outer.momentum);
  const size_t n = global.size();
  CheckLengths(outer, n, mean_then_next.size(), momentum.size(), next_momentum.size());
  uint32_t bad;
  if (outer.momentum == 0) {
    bad = StepInto<false, false>(lr, mu, mean_then_next.data(), global.data(), nullptr, nullptr, n);
  } else if (outer.nesterov) {
    bad = StepInto<true, true>(lr, mu, mean_then_next.data(), global.data(), momentum.data(),
                               next_momentum.data(), n);
  } else {
    bad = StepInto<true, false>(lr, mu, mean_then_next.data(), global.data(), momentum.data(),
                                next_momentum.data(), n);
  }
  return bad == 0;
}

void OuterStepInPlace(const OuterOptimizer& outer, absl::Span<const float> mean,
                      absl::Span<float> global, absl::Span<float> momentum) {
  const float lr = static_cast<float>(outer.lr);
  const float mu = static_cast<float>(outer.momentum);
  const size_t n = global.size();
  CheckLengths(outer, n, mean.size(), momentum.size(), momentum.size());
  if (outer.momentum == 0) {
    StepInPlace<false, false>(lr, mu, mean.data(), global.data(), nullptr, n);
  } else if (outer.nesterov) {
    StepInPlace<true, true>(lr, mu, mean.data(), global.data(), momentum.data(), n);
  } else {
    StepInPlace<true, false>(lr, mu, mean.data(), global.data(), momentum.data(), n);
  }
}

}  // namespace localsgd
