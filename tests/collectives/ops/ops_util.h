#pragma once
// Shared helpers of the collective-operation tests: deterministic per-rank data, a reference
// reduction, (misaligned) buffers, a cache of loopback meshes per layout (mesh setup is the
// expensive part), and result checking that names the first differing element.
//
// Data: integers are random over their full range (wrap-around happens, and integer
// sum/prod/min/max are order-independent, so the reference is exact); floats are drawn from
// {-2, -1, 1, 2}, so with <= 8 ranks every sum and product is exactly representable even in
// fp16/bf16 and the result does not depend on the reduction order. Float results are therefore
// compared bitwise too (tolerance 0).
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "collectives/algo/algorithms.h"
#include "collectives/reduce/reduce.h"
#include "tests/collectives/mesh_util.h"

namespace detwan::collectives::testing {



// Element i of rank `rank`'s contribution for data set `seed`.
inline void fill(std::byte* out, size_t count, DataType type, uint64_t seed, int rank,
                 size_t first_index = 0) {
  const size_t size = data_type_size(type);
  static constexpr float kFloats[] = {-2.0f, -1.0f, 1.0f, 2.0f};
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits =
        mix(seed * 1'000'003 + static_cast<uint64_t>(rank) * 7'919 + mix(first_index + i));
    std::byte* e = out + i * size;
    const float f = kFloats[bits & 3];
    switch (type) {
      case DataType::kFloat16: {
        const uint16_t h = reduce::float_to_half(f);
        std::memcpy(e, &h, 2);
        break;
      }
      case DataType::kBfloat16: {
        const uint16_t b = reduce::float_to_bfloat16(f);
        std::memcpy(e, &b, 2);
        break;
      }
      case DataType::kFloat32:
        std::memcpy(e, &f, 4);
        break;
      case DataType::kFloat64: {
        const double d = f;
        std::memcpy(e, &d, 8);
        break;
      }
      default:
        std::memcpy(e, &bits, size);
    }
  }
}

inline std::vector<std::byte> contribution(size_t count, DataType type, uint64_t seed, int rank,
                                           size_t first_index = 0) {
  std::vector<std::byte> out(count * data_type_size(type));
  fill(out.data(), count, type, seed, rank, first_index);
  return out;
}

// Ranks 0..n-1 folded in rank order, then averaged (exact for the data above).
inline std::vector<std::byte> reference_reduce(int n, size_t count, DataType type, ReduceOp op,
                                               uint64_t seed, size_t first_index = 0) {
  auto acc = contribution(count, type, seed, 0, first_index);
  for (int r = 1; r < n; ++r) {
    const auto in = contribution(count, type, seed, r, first_index);
    reduce::reduce_inplace(acc.data(), in.data(), count, type, op);
  }
  reduce::finalize_average(acc.data(), count, type, op, n);
  return acc;
}

// `bytes` bytes starting `misalign` bytes into an allocation, with guard bytes on both sides.
struct Buffer {
  static constexpr std::byte kGuard{0x5a};
  Buffer(size_t bytes_in, size_t misalign)
      : storage(bytes_in + misalign + 8, kGuard), offset(misalign), bytes(bytes_in) {}
  std::byte* data() { return storage.data() + offset; }
  [[nodiscard]] bool guards_intact() const {
    for (size_t i = 0; i < offset; ++i) {
      if (storage[i] != kGuard) return false;
    }
    for (size_t i = offset + bytes; i < storage.size(); ++i) {
      if (storage[i] != kGuard) return false;
    }
    return true;
  }
  std::vector<std::byte> storage;
  size_t offset;
  size_t bytes;
};

// Ok, or an error naming the first differing element.
inline Result<void> compare(const std::byte* got, const std::byte* want, size_t count,
                            DataType type, const std::string& what) {
  const size_t size = data_type_size(type);
  if (count == 0 || std::memcmp(got, want, count * size) == 0) return {};
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * size, want + i * size, size) != 0) {
      uint64_t g = 0;
      uint64_t w = 0;
      std::memcpy(&g, got + i * size, size);
      std::memcpy(&w, want + i * size, size);
      return make_error(ErrorCode::kInternal,
                        fmt::format("{}: element {} of {} ({}) is {:#x}, expected {:#x}", what, i,
                                    count, to_string(type), g, w));
    }
  }
  return {};
}

// "" when every rank succeeded, else each failing rank's message.
inline std::string failures(const std::vector<Result<void>>& results) {
  std::string out;
  for (size_t r = 0; r < results.size(); ++r) {
    if (!results[r]) out += fmt::format("rank {}: {}\n", r, results[r].error().message);
  }
  return out;
}

// Meshes by (ranks, sites, faults), built on first use and kept for the test binary's life
// (destroyed by clear(), from a suite's TearDownTestSuite).
class MeshCache {
 public:
  Mesh* get(int n, int sites = 1, const std::string& faults = "") {
    auto key = std::make_tuple(n, sites, faults);
    auto it = meshes_.find(key);
    if (it != meshes_.end()) return it->second.get();
    auto mesh = make_mesh(site_layout(n, sites), faults);
    Mesh* raw = mesh.get();
    if (mesh) meshes_.emplace(key, std::move(mesh));
    return raw;
  }
  void drop(int n, int sites = 1, const std::string& faults = "") {
    meshes_.erase(std::make_tuple(n, sites, faults));
  }
  void clear() { meshes_.clear(); }

 private:
  std::map<std::tuple<int, int, std::string>, std::unique_ptr<Mesh>> meshes_;
};

inline algo::OpContext context(Mesh& mesh, int rank, int64_t chunk_bytes = 0) {
  return algo::OpContext{*mesh.peers[static_cast<size_t>(rank)], mesh.topology, guard_deadline(),
                         chunk_bytes};
}

inline std::string name(Algorithm algorithm) { return std::string(to_string(algorithm)); }

}  // namespace detwan::collectives::testing
