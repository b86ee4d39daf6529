#include "transport/fec/codec.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include <isa-l/erasure_code.h>

namespace detwan::transport::fec {
namespace {

using common::Status;

inline constexpr int kMaxSymbols = kMaxDataSymbols + kMaxParitySymbols;
// Bounds on the table caches: a connection uses one k and a few m values, and a handful of
// erasure patterns dominate, so a small LRU keeps the hit rate high and the memory bounded
// (worst case 64 x 32 x 128 x 32 bytes = 8 MiB of decode tables).
inline constexpr size_t kMaxEncodeEntries = 16;
inline constexpr size_t kMaxDecodeEntries = 64;

static_assert(kMaxSymbols <= 256, "Cauchy matrices need k + m <= 256");

bool valid_shape(int k, int m) {
  return k >= 1 && k <= kMaxDataSymbols && m >= 0 && m <= kMaxParitySymbols && k + m <= 256;
}

// Present-symbol bitmap over k + m <= 160 symbols.
using SymbolMask = std::array<uint64_t, (kMaxSymbols + 63) / 64>;

struct EncodeEntry {
  int k = 0;
  int m = 0;
  uint64_t last_used = 0;
  std::vector<unsigned char> tables;  // 32 * k * m bytes, from ec_init_tables
};

struct DecodeEntry {
  int k = 0;
  int m = 0;
  SymbolMask present{};
  uint64_t last_used = 0;
  int missing_count = 0;
  std::array<uint8_t, kMaxDataSymbols> sources{};    // the k symbols the decode reads
  std::array<uint8_t, kMaxParitySymbols> missing{};  // the data symbols it rebuilds
  std::vector<unsigned char> tables;                 // 32 * k * missing_count bytes
};

// Full (k + m) x k Cauchy generator: identity on top, parity rows below. Row k + i does not
// depend on m, so parity i is the same symbol whatever m the adaptive policy picks.
std::vector<unsigned char> generator_matrix(int k, int m) {
  std::vector<unsigned char> matrix(static_cast<size_t>((k + m) * k));
  gf_gen_cauchy1_matrix(matrix.data(), k + m, k);
  return matrix;
}

}  // namespace

class RsCodecImpl {
 public:
  const EncodeEntry& encode_entry(int k, int m) {
    ++clock_;
    for (auto& entry : encode_) {
      if (entry.k == k && entry.m == m) {
        entry.last_used = clock_;
        return entry;
      }
    }
    EncodeEntry& entry = slot(encode_, kMaxEncodeEntries);
    entry.k = k;
    entry.m = m;
    entry.last_used = clock_;
    std::vector<unsigned char> matrix = generator_matrix(k, m);
    entry.tables.assign(static_cast<size_t>(32 * k * m), 0);
    ec_init_tables(k, m, matrix.data() + static_cast<size_t>(k * k), entry.tables.data());
    return entry;
  }

  // nullptr only if the chosen k x k submatrix is singular, which a Cauchy generator rules
  // out; kept as a checked result rather than an assert.
  const DecodeEntry* decode_entry(int k, int m, const SymbolMask& present) {
    ++clock_;
    for (auto& entry : decode_) {
      if (entry.k == k && entry.m == m && entry.present == present) {
        entry.last_used = clock_;
        return &entry;
      }
    }
    DecodeEntry& entry = slot(decode_, kMaxDecodeEntries);
    entry.k = 0;  // invalid until fully built
    entry.missing_count = 0;
    int chosen = 0;
    for (int i = 0; i < k + m && chosen < k; ++i) {
      if (bit(present, i)) entry.sources[static_cast<size_t>(chosen++)] = static_cast<uint8_t>(i);
    }
    for (int i = 0; i < k; ++i) {
      if (!bit(present, i)) {
        entry.missing[static_cast<size_t>(entry.missing_count++)] = static_cast<uint8_t>(i);
      }
    }
    const std::vector<unsigned char> generator = generator_matrix(k, m);
    std::vector<unsigned char> sub(static_cast<size_t>(k * k));
    std::vector<unsigned char> inverse(static_cast<size_t>(k * k));
    for (int r = 0; r < k; ++r) {
      const size_t row = entry.sources[static_cast<size_t>(r)];
      std::memcpy(&sub[static_cast<size_t>(r * k)], &generator[row * static_cast<size_t>(k)],
                  static_cast<size_t>(k));
    }
    if (gf_invert_matrix(sub.data(), inverse.data(), k) != 0) return nullptr;
    // data = inverse x sources, so missing data symbol e is row e of the inverse.
    std::vector<unsigned char> rows(static_cast<size_t>(entry.missing_count * k));
    for (int e = 0; e < entry.missing_count; ++e) {
      const size_t data_row = entry.missing[static_cast<size_t>(e)];
      std::memcpy(&rows[static_cast<size_t>(e * k)], &inverse[data_row * static_cast<size_t>(k)],
                  static_cast<size_t>(k));
    }
    entry.tables.assign(static_cast<size_t>(32 * k * entry.missing_count), 0);
    ec_init_tables(k, entry.missing_count, rows.data(), entry.tables.data());
    entry.k = k;
    entry.m = m;
    entry.present = present;
    entry.last_used = clock_;
    return &entry;
  }

  static bool bit(const SymbolMask& mask, int i) {
    return ((mask[static_cast<size_t>(i / 64)] >> (i % 64)) & 1U) != 0;
  }

 private:
  // Returns a free entry, or the least recently used one once the cache is full.
  template <typename Entry>
  static Entry& slot(std::vector<Entry>& cache, size_t capacity) {
    if (cache.size() < capacity) return cache.emplace_back();
    return *std::min_element(cache.begin(), cache.end(), [](const Entry& a, const Entry& b) {
      return a.last_used < b.last_used;
    });
  }

  uint64_t clock_ = 0;
  std::vector<EncodeEntry> encode_;
  std::vector<DecodeEntry> decode_;
};

RsCodec::RsCodec() : impl_(std::make_unique<RsCodecImpl>()) {}
RsCodec::~RsCodec() = default;
RsCodec::RsCodec(RsCodec&&) noexcept = default;
RsCodec& RsCodec::operator=(RsCodec&&) noexcept = default;

Status RsCodec::encode(std::span<const std::byte* const> data, std::span<std::byte* const> parity,
                       size_t symbol_bytes) {
  const int k = static_cast<int>(std::min<size_t>(data.size(), 1000));
  const int m = static_cast<int>(std::min<size_t>(parity.size(), 1000));
  if (!valid_shape(k, m) || symbol_bytes == 0 || symbol_bytes > INT32_MAX) {
    return Status::kInvalidArgument;
  }
  if (std::any_of(data.begin(), data.end(), [](const std::byte* p) { return p == nullptr; }) ||
      std::any_of(parity.begin(), parity.end(), [](std::byte* p) { return p == nullptr; })) {
    return Status::kInvalidArgument;
  }
  if (impl_ == nullptr) impl_ = std::make_unique<RsCodecImpl>();  // moved-from codec
  if (m == 0) return Status::kOk;
  const EncodeEntry& entry = impl_->encode_entry(k, m);
  // ISA-L takes non-const pointers but only reads the sources.
  std::array<unsigned char*, kMaxDataSymbols> sources{};
  std::array<unsigned char*, kMaxParitySymbols> outputs{};
  for (int j = 0; j < k; ++j) {
    sources[static_cast<size_t>(j)] = const_cast<unsigned char*>(
        reinterpret_cast<const unsigned char*>(data[static_cast<size_t>(j)]));
  }
  for (int i = 0; i < m; ++i) {
    outputs[static_cast<size_t>(i)] =
        reinterpret_cast<unsigned char*>(parity[static_cast<size_t>(i)]);
  }
  ec_encode_data(static_cast<int>(symbol_bytes), k, m,
                 const_cast<unsigned char*>(entry.tables.data()), sources.data(), outputs.data());
  return Status::kOk;
}

Status RsCodec::decode(int k, int m, std::span<std::byte* const> symbols,
                       std::span<const bool> present, size_t symbol_bytes) {
  if (!valid_shape(k, m) || symbol_bytes == 0 || symbol_bytes > INT32_MAX) {
    return Status::kInvalidArgument;
  }
  const auto n = static_cast<size_t>(k + m);
  if (symbols.size() != n || present.size() != n) return Status::kInvalidArgument;
  SymbolMask mask{};
  int present_count = 0;
  bool data_missing = false;
  for (size_t i = 0; i < n; ++i) {
    if (symbols[i] == nullptr && (present[i] || i < static_cast<size_t>(k))) {
      return Status::kInvalidArgument;  // a source to read or a slot to rebuild into
    }
    if (present[i]) {
      mask[i / 64] |= uint64_t{1} << (i % 64);
      ++present_count;
    } else if (i < static_cast<size_t>(k)) {
      data_missing = true;
    }
  }
  if (present_count < k) return Status::kInvalidArgument;
  if (!data_missing) return Status::kOk;
  if (impl_ == nullptr) impl_ = std::make_unique<RsCodecImpl>();
  // Only the first k present symbols are read, so the cache key is the pattern up to there.
  int seen = 0;
  for (size_t i = 0; i < n; ++i) {
    if (seen == k) mask[i / 64] &= ~(uint64_t{1} << (i % 64));
    if (RsCodecImpl::bit(mask, static_cast<int>(i))) ++seen;
  }
  const DecodeEntry* entry = impl_->decode_entry(k, m, mask);
  if (entry == nullptr) return Status::kInvalidArgument;
  std::array<unsigned char*, kMaxDataSymbols> sources{};
  std::array<unsigned char*, kMaxParitySymbols> outputs{};
  for (int j = 0; j < k; ++j) {
    sources[static_cast<size_t>(j)] =
        reinterpret_cast<unsigned char*>(symbols[entry->sources[static_cast<size_t>(j)]]);
  }
  for (int e = 0; e < entry->missing_count; ++e) {
    outputs[static_cast<size_t>(e)] =
        reinterpret_cast<unsigned char*>(symbols[entry->missing[static_cast<size_t>(e)]]);
  }
  ec_encode_data(static_cast<int>(symbol_bytes), k, entry->missing_count,
                 const_cast<unsigned char*>(entry->tables.data()), sources.data(), outputs.data());
  return Status::kOk;
}

namespace {

// P(X > m) for X ~ Binomial(n, p), summed term by term over the tail (no 1 - sum
// cancellation), each term from lgamma so that (1 - p)^n cannot underflow to a wrong zero.
double binomial_tail_above(int n, int m, double p) {
  if (m >= n) return 0.0;
  if (p >= 1.0) return 1.0;
  const double log_p = std::log(p);
  const double log_q = std::log1p(-p);
  const double log_n_fact = std::lgamma(n + 1.0);
  double tail = 0.0;
  for (int i = m + 1; i <= n; ++i) {
    const double log_term =
        log_n_fact - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) + i * log_p + (n - i) * log_q;
    tail += std::exp(log_term);
  }
  return std::min(tail, 1.0);
}

}  // namespace

int AdaptivePolicy::parity_for(int k, double loss_rate, int max_m) const {
  if (max_m <= 0 || k <= 0) return 0;
  if (!(loss_rate >= 1e-6)) return 0;  // also NaN: no evidence of loss
  const int limit = std::min(max_m, kMaxParitySymbols);
  for (int m = 0; m < limit; ++m) {
    if (binomial_tail_above(k + m, m, loss_rate) < target_block_loss) return m;
  }
  return limit;
}

void LossEstimator::on_window(uint64_t sent, uint64_t lost) {
  if (sent == 0) return;  // an idle window says nothing about the path
  const double sample = static_cast<double>(std::min(lost, sent)) / static_cast<double>(sent);
  if (!primed_) {
    rate_ = sample;
    primed_ = true;
    return;
  }
  rate_ += alpha_ * (sample - rate_);
}

}  // namespace detwan::transport::fec
