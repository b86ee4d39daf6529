#include "transport/fec/codec.h"

#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace detwan::transport::fec {
namespace {

using common::Status;

// One FEC block: k data + m parity symbols of `symbol_bytes`, with random data and the parity
// encoded from it; `original` keeps a copy of every symbol to compare against after decode.
struct Block {
  Block(int k_in, int m_in, size_t symbol_bytes_in, std::mt19937_64& rng)
      : k(k_in),
        m(m_in),
        symbol_bytes(symbol_bytes_in),
        storage(static_cast<size_t>(k + m), std::vector<std::byte>(symbol_bytes)) {
    std::uniform_int_distribution<int> byte_dist(0, 255);
    for (int i = 0; i < k; ++i) {
      for (auto& b : storage[static_cast<size_t>(i)]) b = static_cast<std::byte>(byte_dist(rng));
    }
  }

  std::vector<std::byte*> pointers() {
    std::vector<std::byte*> out;
    for (auto& s : storage) out.push_back(s.data());
    return out;
  }

  Status encode(RsCodec& codec) {
    std::vector<const std::byte*> data;
    std::vector<std::byte*> parity;
    for (int i = 0; i < k; ++i) data.push_back(storage[static_cast<size_t>(i)].data());
    for (int i = k; i < k + m; ++i) parity.push_back(storage[static_cast<size_t>(i)].data());
    Status status = codec.encode(data, parity, symbol_bytes);
    original = storage;
    return status;
  }

  // Wipes the symbols marked absent, decodes, and checks every data symbol is byte-exact.
  void erase_decode_and_check(RsCodec& codec, const std::vector<bool>& present_vec) {
    for (size_t i = 0; i < storage.size(); ++i) {
      if (!present_vec[i]) std::fill(storage[i].begin(), storage[i].end(), std::byte{0xA5});
    }
    std::unique_ptr<bool[]> present(new bool[present_vec.size()]);
    std::copy(present_vec.begin(), present_vec.end(), present.get());
    auto ptrs = pointers();
    ASSERT_EQ(codec.decode(k, m, ptrs, std::span<const bool>(present.get(), present_vec.size()),
                           symbol_bytes),
              Status::kOk);
    for (int i = 0; i < k; ++i) {
      ASSERT_EQ(storage[static_cast<size_t>(i)], original[static_cast<size_t>(i)])
          << "data symbol " << i << " k=" << k << " m=" << m;
    }
    storage = original;
  }

  int k;
  int m;
  size_t symbol_bytes;
  std::vector<std::vector<std::byte>> storage;
  std::vector<std::vector<std::byte>> original;
};

TEST(RsCodec, ParityIsNotTrivialAndDeterministic) {
  std::mt19937_64 rng(1);
  RsCodec codec;
  Block block(8, 3, 256, rng);
  ASSERT_EQ(block.encode(codec), Status::kOk);
  for (int i = 8; i < 11; ++i) {
    EXPECT_NE(block.original[static_cast<size_t>(i)], std::vector<std::byte>(256));
  }
  RsCodec other;
  Block again = block;
  ASSERT_EQ(again.encode(other), Status::kOk);
  EXPECT_EQ(again.original, block.original);
}

TEST(RsCodec, K4M2EveryErasurePattern) {
  std::mt19937_64 rng(2);
  RsCodec codec;
  Block block(4, 2, 1024, rng);
  ASSERT_EQ(block.encode(codec), Status::kOk);
  int patterns = 0;
  for (unsigned mask = 0; mask < (1U << 6); ++mask) {
    if (__builtin_popcount(mask) > 2) continue;
    std::vector<bool> present(6);
    for (int i = 0; i < 6; ++i) present[static_cast<size_t>(i)] = ((mask >> i) & 1U) == 0;
    block.erase_decode_and_check(codec, present);
    ++patterns;
  }
  EXPECT_EQ(patterns, 1 + 6 + 15);
}

TEST(RsCodec, SmallShapesEveryErasurePattern) {
  std::mt19937_64 rng(3);
  RsCodec codec;
  for (int k = 1; k <= 6; ++k) {
    for (int m = 0; m <= 4; ++m) {
      Block block(k, m, 100, rng);
      ASSERT_EQ(block.encode(codec), Status::kOk);
      const int n = k + m;
      for (unsigned mask = 0; mask < (1U << n); ++mask) {
        if (__builtin_popcount(mask) > m) continue;
        std::vector<bool> present(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) present[static_cast<size_t>(i)] = ((mask >> i) & 1U) == 0;
        block.erase_decode_and_check(codec, present);
      }
    }
  }
}

TEST(RsCodec, K32M4RandomPatterns) {
  std::mt19937_64 rng(4);
  RsCodec codec;
  Block block(32, 4, 1400, rng);
  ASSERT_EQ(block.encode(codec), Status::kOk);
  std::vector<int> order(36);
  for (int trial = 0; trial < 300; ++trial) {
    for (int i = 0; i < 36; ++i) order[static_cast<size_t>(i)] = i;
    std::shuffle(order.begin(), order.end(), rng);
    const int losses = static_cast<int>(rng() % 5);
    std::vector<bool> present(36, true);
    for (int i = 0; i < losses; ++i)
      present[static_cast<size_t>(order[static_cast<size_t>(i)])] = false;
    block.erase_decode_and_check(codec, present);
  }
}

TEST(RsCodec, LargestShapeAllDataLostWithinParity) {
  std::mt19937_64 rng(5);
  RsCodec codec;
  Block block(kMaxDataSymbols, kMaxParitySymbols, 64, rng);
  ASSERT_EQ(block.encode(codec), Status::kOk);
  std::vector<bool> present(static_cast<size_t>(kMaxDataSymbols + kMaxParitySymbols), true);
  for (int i = 0; i < kMaxParitySymbols; ++i) present[static_cast<size_t>(i * 4)] = false;
  block.erase_decode_and_check(codec, present);
}

TEST(RsCodec, OddSymbolLengths) {
  std::mt19937_64 rng(6);
  RsCodec codec;
  for (size_t len : {size_t{1}, size_t{7}, size_t{15}, size_t{33}, size_t{65}, size_t{1471}}) {
    Block block(10, 3, len, rng);
    ASSERT_EQ(block.encode(codec), Status::kOk);
    std::vector<bool> present(13, true);
    present[0] = present[5] = present[9] = false;
    block.erase_decode_and_check(codec, present);
    present.assign(13, true);
    present[3] = present[10] = false;
    block.erase_decode_and_check(codec, present);
  }
}

TEST(RsCodec, DecodeCacheEvictionStillCorrect) {
  // More distinct erasure patterns than the cache holds, then the first ones again.
  std::mt19937_64 rng(7);
  RsCodec codec;
  Block block(20, 2, 64, rng);
  ASSERT_EQ(block.encode(codec), Status::kOk);
  for (int round = 0; round < 2; ++round) {
    for (int a = 0; a < 20; ++a) {
      for (int b = a + 1; b < 20; b += 3) {
        std::vector<bool> present(22, true);
        present[static_cast<size_t>(a)] = present[static_cast<size_t>(b)] = false;
        block.erase_decode_and_check(codec, present);
      }
    }
  }
}

TEST(RsCodec, ParityShapeChangesReuseTheCodec) {
  std::mt19937_64 rng(8);
  RsCodec codec;
  for (int m : {2, 4, 1, 3, 2}) {
    Block block(16, m, 200, rng);
    ASSERT_EQ(block.encode(codec), Status::kOk);
    std::vector<bool> present(static_cast<size_t>(16 + m), true);
    for (int i = 0; i < m; ++i) present[static_cast<size_t>(i * 3)] = false;
    block.erase_decode_and_check(codec, present);
  }
}

TEST(RsCodec, TooManyLossesIsInvalidArgument) {
  std::mt19937_64 rng(9);
  RsCodec codec;
  Block block(4, 2, 32, rng);
  ASSERT_EQ(block.encode(codec), Status::kOk);
  auto ptrs = block.pointers();
  bool present[6] = {false, true, false, true, true, false};
  EXPECT_EQ(codec.decode(4, 2, ptrs, present, 32), Status::kInvalidArgument);
  // The surviving symbols were not touched.
  EXPECT_EQ(block.storage, block.original);
}

TEST(RsCodec, NoDataMissingIsANoOp) {
  std::mt19937_64 rng(10);
  RsCodec codec;
  Block block(4, 2, 32, rng);
  ASSERT_EQ(block.encode(codec), Status::kOk);
  auto ptrs = block.pointers();
  ptrs[4] = nullptr;  // a missing parity symbol needs no storage
  bool present[6] = {true, true, true, true, false, true};
  EXPECT_EQ(codec.decode(4, 2, ptrs, present, 32), Status::kOk);
  EXPECT_EQ(block.storage, block.original);
}

TEST(RsCodec, EncodeRejectsBadArguments) {
  RsCodec codec;
  std::vector<std::byte> buf(64 * 200);
  std::vector<const std::byte*> data(200, buf.data());
  std::vector<std::byte*> parity(40, buf.data());
  auto d = [&](size_t n) { return std::span<const std::byte* const>(data.data(), n); };
  auto p = [&](size_t n) { return std::span<std::byte* const>(parity.data(), n); };
  EXPECT_EQ(codec.encode(d(0), p(2), 16), Status::kInvalidArgument);    // k = 0
  EXPECT_EQ(codec.encode(d(129), p(2), 16), Status::kInvalidArgument);  // k > 128
  EXPECT_EQ(codec.encode(d(4), p(33), 16), Status::kInvalidArgument);   // m > 32
  EXPECT_EQ(codec.encode(d(4), p(2), 0), Status::kInvalidArgument);     // empty symbols
  std::vector<const std::byte*> with_null(data.begin(), data.begin() + 4);
  with_null[2] = nullptr;
  EXPECT_EQ(codec.encode(with_null, p(2), 16), Status::kInvalidArgument);
  std::vector<std::byte*> null_parity{buf.data(), nullptr};
  EXPECT_EQ(codec.encode(d(4), null_parity, 16), Status::kInvalidArgument);
  EXPECT_EQ(codec.encode(d(4), p(0), 16), Status::kOk);    // m = 0: nothing
  EXPECT_EQ(codec.encode(d(128), p(32), 1), Status::kOk);  // the largest block
}

TEST(RsCodec, DecodeRejectsBadArguments) {
  RsCodec codec;
  std::vector<std::byte> buf(16 * 10);
  std::vector<std::byte*> symbols(6, buf.data());
  bool present[6] = {false, true, true, true, true, true};
  EXPECT_EQ(codec.decode(0, 2, symbols, present, 16), Status::kInvalidArgument);
  EXPECT_EQ(codec.decode(129, 2, symbols, present, 16), Status::kInvalidArgument);
  EXPECT_EQ(codec.decode(4, 33, symbols, present, 16), Status::kInvalidArgument);
  EXPECT_EQ(codec.decode(4, -1, symbols, present, 16), Status::kInvalidArgument);
  EXPECT_EQ(codec.decode(4, 2, symbols, present, 0), Status::kInvalidArgument);
  // Span sizes must be k + m.
  EXPECT_EQ(codec.decode(4, 1, symbols, present, 16), Status::kInvalidArgument);
  EXPECT_EQ(codec.decode(4, 2, std::span<std::byte* const>(symbols.data(), 5), present, 16),
            Status::kInvalidArgument);
  EXPECT_EQ(codec.decode(4, 2, symbols, std::span<const bool>(present, 5), 16),
            Status::kInvalidArgument);
  // A missing data symbol needs storage to be rebuilt into.
  symbols[0] = nullptr;
  EXPECT_EQ(codec.decode(4, 2, symbols, present, 16), Status::kInvalidArgument);
}

TEST(RsCodec, MovedCodecKeepsWorking) {
  std::mt19937_64 rng(11);
  RsCodec first;
  Block block(6, 2, 50, rng);
  ASSERT_EQ(block.encode(first), Status::kOk);
  RsCodec second(std::move(first));
  std::vector<bool> present(8, true);
  present[1] = present[4] = false;
  block.erase_decode_and_check(second, present);
}

}  // namespace
}  // namespace detwan::transport::fec
