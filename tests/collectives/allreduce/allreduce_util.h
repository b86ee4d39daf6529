#pragma once
// Shared by the allreduce tests: exact reference inputs/outputs for every DataType x ReduceOp,
// and one call that runs an allreduce on every rank of a mesh and checks the result.
//
// Exactness: inputs are small integers chosen so that every partial result is exactly
// representable in the type (|sum| <= 8 * 3, products of {-2,-1,1,2} for floats, avg inputs
// multiples of n so the division is exact), so floats are compared bit for bit like integers.
// Integer products use -3..3 and wrap in the narrow types, which the reference reproduces by
// keeping the low bytes of the exact int64 product.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "collectives/algo/algorithms.h"
#include "collectives/reduce/reduce.h"
#include "tests/collectives/mesh_util.h"

namespace detwan::collectives::testing {

inline constexpr Algorithm kAllAlgorithms[] = {
    Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kTree, Algorithm::kHierarchical};

inline bool is_unsigned(DataType t) {
  return t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
}


// The exact input of `rank` at element i.
inline int64_t input_value(DataType type, ReduceOp op, int n, int rank, size_t i,
                           uint64_t seed) {
  const uint64_t h = mix(seed ^ mix(static_cast<uint64_t>(rank) * 1000003ull + i));
  if (is_unsigned(type)) return static_cast<int64_t>(h % 4);  // 0..3
  if (is_floating(type)) {
    if (op == ReduceOp::kProd) {
      static constexpr int64_t kFactors[] = {-2, -1, 1, 2};
      return kFactors[h % 4];
    }
    if (op == ReduceOp::kAvg) return n * (static_cast<int64_t>(h % 7) - 3);
  }
  return static_cast<int64_t>(h % 7) - 3;  // -3..3
}

// Stores the exact value v in element i of buf (integers: low bytes of two's complement).
inline void store_value(DataType type, std::byte* buf, size_t i, int64_t v) {
  const size_t size = data_type_size(type);
  std::byte* at = buf + i * size;
  switch (type) {
    case DataType::kFloat16: {
      const uint16_t bits = reduce::float_to_half(static_cast<float>(v));
      std::memcpy(at, &bits, 2);
      return;
    }
    case DataType::kBfloat16: {
      const uint16_t bits = reduce::float_to_bfloat16(static_cast<float>(v));
      std::memcpy(at, &bits, 2);
      return;
    }
    case DataType::kFloat32: {
      const auto f = static_cast<float>(v);
      std::memcpy(at, &f, 4);
      return;
    }
    case DataType::kFloat64: {
      const auto d = static_cast<double>(v);
      std::memcpy(at, &d, 8);
      return;
    }
    default:
      std::memcpy(at, &v, size);  // little endian: the low bytes
      return;
  }
}

// The exact expected result of element i.
inline int64_t expected_value(DataType type, ReduceOp op, int n, size_t i, uint64_t seed) {
  int64_t acc = input_value(type, op, n, 0, i, seed);
  for (int r = 1; r < n; ++r) {
    const int64_t v = input_value(type, op, n, r, i, seed);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
    }
  }
  if (op == ReduceOp::kAvg) acc /= n;  // truncates toward zero, as the kernels do
  return acc;
}

inline std::vector<std::byte> make_input(DataType type, ReduceOp op, int n, int rank,
                                         size_t count, uint64_t seed) {
  std::vector<std::byte> out(count * data_type_size(type));
  for (size_t i = 0; i < count; ++i) {
    store_value(type, out.data(), i, input_value(type, op, n, rank, i, seed));
  }
  return out;
}

inline std::vector<std::byte> make_expected(DataType type, ReduceOp op, int n, size_t count,
                                            uint64_t seed) {
  std::vector<std::byte> out(count * data_type_size(type));
  for (size_t i = 0; i < count; ++i) {
    store_value(type, out.data(), i, expected_value(type, op, n, i, seed));
  }
  return out;
}

struct Case {
  Algorithm algorithm = Algorithm::kRing;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 1;
  bool in_place = false;
  size_t misalign_bytes = 0;  // buffers start this many bytes past an allocation
  int64_t chunk_bytes = 0;
  uint64_t seed = 1;

  [[nodiscard]] std::string describe() const {
    return fmt::format("{} {} {} count={} {} misalign={} chunk={} seed={}",
                       to_string(algorithm), to_string(type), to_string(op), count,
                       in_place ? "in-place" : "out-of-place", misalign_bytes, chunk_bytes,
                       seed);
  }
};

// Runs `c` on every rank of `mesh` with the given per-rank inputs; returns each rank's output
// (empty vectors for failed ranks, after a test failure naming the rank and the case).
inline std::vector<std::vector<std::byte>> run_allreduce(
    Mesh& mesh, const Case& c, const std::vector<std::vector<std::byte>>& inputs) {
  const int n = static_cast<int>(mesh.peers.size());
  const size_t bytes = c.count * data_type_size(c.type);
  std::vector<std::vector<std::byte>> send_store(n), recv_store(n), outputs(n);
  for (int r = 0; r < n; ++r) {
    send_store[r].assign(bytes + c.misalign_bytes + 1, std::byte{0x5a});
    recv_store[r].assign(bytes + c.misalign_bytes + 1, std::byte{0xa5});
    if (bytes > 0) std::memcpy(send_store[r].data() + c.misalign_bytes, inputs[r].data(), bytes);
  }
  auto results = run_ranks(n, [&](int r) -> Result<void> {
    algo::OpContext ctx{*mesh.peers[r], mesh.topology, guard_deadline(), c.chunk_bytes};
    std::byte* send = send_store[r].data() + c.misalign_bytes;
    std::byte* recv = c.in_place ? send : recv_store[r].data() + c.misalign_bytes;
    return algo::all_reduce(ctx, c.algorithm, send, recv, c.count, c.type, c.op);
  });
  for (int r = 0; r < n; ++r) {
    if (!results[r]) {
      ADD_FAILURE() << "rank " << r << " failed: " << results[r].error().message << " ["
                    << c.describe() << "]";
      continue;
    }
    auto& store = c.in_place ? send_store[r] : recv_store[r];
    // The byte after the buffer is a guard: nothing may write past count elements.
    EXPECT_EQ(store[bytes + c.misalign_bytes], c.in_place ? std::byte{0x5a} : std::byte{0xa5})
        << "rank " << r << " wrote past the buffer [" << c.describe() << "]";
    outputs[r].assign(store.begin() + static_cast<ptrdiff_t>(c.misalign_bytes),
                      store.begin() + static_cast<ptrdiff_t>(c.misalign_bytes + bytes));
  }
  return outputs;
}

// First differing element index, or -1.
inline int64_t first_mismatch(const std::vector<std::byte>& a, const std::vector<std::byte>& b,
                              size_t elem) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i / elem);
  }
  return -1;
}

// Runs `c` with the exact inputs and checks every rank bit for bit against the reference.
inline void check_exact(Mesh& mesh, const Case& c) {
  const int n = static_cast<int>(mesh.peers.size());
  std::vector<std::vector<std::byte>> inputs(n);
  for (int r = 0; r < n; ++r) inputs[r] = make_input(c.type, c.op, n, r, c.count, c.seed);
  const auto expected = make_expected(c.type, c.op, n, c.count, c.seed);
  const auto outputs = run_allreduce(mesh, c, inputs);
  for (int r = 0; r < n; ++r) {
    const int64_t bad = first_mismatch(outputs[r], expected, data_type_size(c.type));
    EXPECT_EQ(bad, -1) << "rank " << r << " of " << n << " differs at element " << bad
                       << " (expected " << expected_value(c.type, c.op, n, bad < 0 ? 0 : bad,
                                                          c.seed)
                       << ") [" << c.describe() << "]";
  }
}

}  // namespace detwan::collectives::testing
