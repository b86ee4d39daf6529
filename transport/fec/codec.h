#pragma once
// Reed-Solomon erasure coding of FEC blocks with ISA-L (docs/transport.md "FEC").
//
// A block is k data symbols and m parity symbols of the same length. Any k of the k+m symbols
// rebuild the missing data symbols. Encode/decode matrices are Cauchy matrices
// (gf_gen_cauchy1_matrix), so every k x k submatrix is invertible for k + m <= 256.
// Decode matrices are cached per (k, m, erasure pattern) up to a small bound.
//
// Not thread-safe: one codec per connection (progress thread).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"

namespace detwan::transport::fec {

inline constexpr int kMaxDataSymbols = 128;
inline constexpr int kMaxParitySymbols = 32;

class RsCodecImpl;

class RsCodec {
 public:
  RsCodec();
  ~RsCodec();
  RsCodec(RsCodec&&) noexcept;
  RsCodec& operator=(RsCodec&&) noexcept;

  // parity[i] = sum_j A[k+i][j] * data[j], for i < m. All spans have the same length.
  // kInvalidArgument if k, m or the lengths are out of range.
  [[nodiscard]] common::Status encode(std::span<const std::byte* const> data,
                                      std::span<std::byte* const> parity, size_t symbol_bytes);

  // Rebuilds missing data symbols. `symbols` has k + m entries (data first, then parity);
  // present[i] says which are valid. Missing data symbols are written in place into
  // symbols[i] (the caller provides the storage). kInvalidArgument if fewer than k present.
  [[nodiscard]] common::Status decode(int k, int m, std::span<std::byte* const> symbols,
                                      std::span<const bool> present, size_t symbol_bytes);

 private:
  std::unique_ptr<RsCodecImpl> impl_;
};

// Chooses the parity count for a block of k data symbols so that the probability that more
// than m of the k + m symbols are lost (independent loss at rate p) is below `target`.
// Returns 0 when p is ~0; never more than max_m.
struct AdaptivePolicy {
  double target_block_loss = 1e-3;
  [[nodiscard]] int parity_for(int k, double loss_rate, int max_m) const;
};

// Smoothed loss-rate estimator (EWMA over windows of observed sent/lost segments).
class LossEstimator {
 public:
  explicit LossEstimator(double alpha = 0.125) : alpha_(alpha) {}
  void on_window(uint64_t sent, uint64_t lost);
  [[nodiscard]] double loss_rate() const { return rate_; }

 private:
  double alpha_;
  double rate_ = 0.0;
  bool primed_ = false;
};

}  // namespace detwan::transport::fec
