// common::IdIndex against std::unordered_map: every stored key found with its value, absent keys
// not found, at every size from empty to a few thousand entries and with keys chosen to collide.
#include "common/id_index.h"

#include <cstdint>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace detwan::common {
namespace {

using Entries = std::vector<std::pair<uint32_t, uint32_t>>;

void expect_same(const IdIndex& index, const std::unordered_map<uint32_t, uint32_t>& reference,
                 const std::vector<uint32_t>& probes) {
  for (const auto& [key, value] : reference) ASSERT_EQ(index.find(key), value) << key;
  for (const uint32_t key : probes) {
    const auto it = reference.find(key);
    ASSERT_EQ(index.find(key), it == reference.end() ? IdIndex::kNone : it->second) << key;
  }
}

TEST(IdIndex, EmptyFindsNothing) {
  const IdIndex empty;
  EXPECT_EQ(empty.find(0), IdIndex::kNone);
  EXPECT_EQ(empty.find(7), IdIndex::kNone);
  EXPECT_EQ(empty.find(UINT32_MAX), IdIndex::kNone);
  const IdIndex built{Entries{}};
  EXPECT_EQ(built.find(1), IdIndex::kNone);
}

TEST(IdIndex, KeyZeroAndTheLargestKeyAreKeys) {
  const IdIndex index{Entries{{0, 5}, {UINT32_MAX, 6}, {1, 7}}};
  EXPECT_EQ(index.find(0), 5u);
  EXPECT_EQ(index.find(UINT32_MAX), 6u);
  EXPECT_EQ(index.find(1), 7u);
  EXPECT_EQ(index.find(2), IdIndex::kNone);
}

TEST(IdIndex, FirstOfDuplicateKeysWinsAndNoneValuesAreSkipped) {
  const IdIndex index{Entries{{9, 1}, {9, 2}, {4, IdIndex::kNone}}};
  EXPECT_EQ(index.find(9), 1u);
  EXPECT_EQ(index.find(4), IdIndex::kNone);
}

TEST(IdIndex, MatchesAMapAtEverySize) {
  std::mt19937 rng(17);
  for (uint32_t n = 0; n <= 300; ++n) {
    std::unordered_map<uint32_t, uint32_t> reference;
    Entries entries;
    while (reference.size() < n) {
      const uint32_t key = n % 3 == 0 ? rng() % (4 * n + 1) : rng();  // dense or sparse ids
      if (reference.emplace(key, static_cast<uint32_t>(reference.size())).second) {
        entries.emplace_back(key, reference.at(key));
      }
    }
    std::vector<uint32_t> probes;
    for (int i = 0; i < 200; ++i) probes.push_back(rng() % (8 * n + 8));
    expect_same(IdIndex(entries), reference, probes);
  }
}

TEST(IdIndex, KeysThatShareTheirLowOrHighBits) {
  for (const int shift : {0, 8, 16, 24}) {
    std::unordered_map<uint32_t, uint32_t> reference;
    Entries entries;
    for (uint32_t i = 0; i < 256; ++i) {
      const uint32_t key = i << shift;
      reference.emplace(key, i);
      entries.emplace_back(key, i);
    }
    std::vector<uint32_t> probes;
    for (uint32_t i = 0; i < 1024; ++i) probes.push_back((i << shift) + 1);
    expect_same(IdIndex(entries), reference, probes);
  }
}

TEST(IdIndex, ManyEntries) {
  std::mt19937 rng(3);
  std::unordered_map<uint32_t, uint32_t> reference;
  Entries entries;
  while (reference.size() < 5000) {
    const uint32_t key = rng();
    if (reference.emplace(key, rng() % 1000).second) entries.emplace_back(key, reference.at(key));
  }
  std::vector<uint32_t> probes;
  for (int i = 0; i < 20000; ++i) probes.push_back(rng());
  expect_same(IdIndex(entries), reference, probes);
}

}  // namespace
}  // namespace detwan::common
