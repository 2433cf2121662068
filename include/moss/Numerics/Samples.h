//===- Samples.h - Synthetic test tensors ----------------------*- C++ -*-===//
//
// Deterministic synthetic tensors for demos, tests and the SNR study. The
// distributions are built from the raw output of std::mt19937_64 (fixed by
// the C++ standard), not from std::*_distribution (implementation-defined),
// so a seed gives the same tensor with any standard library; only libm's
// log/sin/cos/pow could change last bits.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_NUMERICS_SAMPLES_H
#define MOSS_NUMERICS_SAMPLES_H

#include <cstdint>
#include <vector>

namespace moss::numerics {

/// Standard normal entries.
std::vector<float> gaussianSample(int64_t rows, int64_t cols, uint64_t seed);

/// Student-t entries with `dof` degrees of freedom (heavy tails).
std::vector<float> studentTSample(int64_t rows, int64_t cols, double dof,
                                  uint64_t seed);

/// LLM-like activations [tokens, channels]: most channels small and
/// heavy-tailed, a few outlier channels 100 to 1000 times larger, and a few
/// per-token spikes.
std::vector<float> llmActivationSample(int64_t tokens, int64_t channels,
                                       uint64_t seed);

} // namespace moss::numerics

#endif // MOSS_NUMERICS_SAMPLES_H
