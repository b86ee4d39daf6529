#pragma once
// Seeded random numbers for the impairment engine. xoshiro256** (Blackman & Vigna) seeded by
// splitmix64: small, fast and the same on every platform and standard library (the std::
// distributions are implementation-defined, so they would break "same seed, same trace").
//
// Each random process of an emulator draws from its own stream (RngStream), so enabling one
// impairment never shifts the decisions of another: `loss=1%` drops the same frames with or
// without `dup=1%` next to it.
#include <cstdint>

namespace detwan::wanem {

enum class RngStream : uint64_t {
  kLoss = 1,
  kBurstLoss = 2,
  kDuplicate = 3,
  kJitter = 4,
  kReorder = 5,
  kCross = 6,
};

class Rng {
 public:
  Rng() noexcept : Rng(1, RngStream::kLoss) {}
  Rng(uint64_t seed, RngStream stream) noexcept {
    uint64_t x = seed ^ (static_cast<uint64_t>(stream) * 0xd1342543de82ef95ULL);
    for (uint64_t& word : state_) word = splitmix64(x);
  }

  uint64_t next() noexcept {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 random bits.
  double uniform01() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1): safe for log() and inverse CDFs.
  double uniform_open01() noexcept { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  // Uniform integer in [0, n) for n > 0 (Lemire's multiply-shift; bias <= n / 2^64).
  uint64_t below(uint64_t n) noexcept {
    __extension__ typedef unsigned __int128 u128;
    return static_cast<uint64_t>((static_cast<u128>(next()) * n) >> 64);
  }
  // True with probability p (p <= 0: never, p >= 1: always).
  bool bernoulli(double p) noexcept { return uniform01() < p; }

 private:
  static uint64_t rotl(uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) noexcept {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t state_[4] = {};
};

}  // namespace detwan::wanem
