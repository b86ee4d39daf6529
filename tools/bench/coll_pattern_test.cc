// The -c 1 check: simulated collectives computed in each type's own arithmetic (rounded after
// every step, in several reduction orders) must count 0 wrong for every collective x type x op
// x rank count; what a broken collective does (a flipped element, a block from the wrong rank,
// an element never written) must be counted. Also the report's table and JSON.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tools/bench/coll_pattern.h"
#include "tools/bench/coll_report.h"
#include "tools/bench/coll_sizes.h"

namespace detwan::bench {
namespace {

using collectives::data_type_size;

using Buffer = std::vector<unsigned char>;

Buffer input_of(const PatternSpec& spec, int rank, size_t count) {
  Buffer b(std::max<size_t>(count, 1) * data_type_size(spec.type));
  fill_input(spec, rank, b.data(), count);
  return b;
}

// acc = acc OP in, element by element, rounded to the type after each step (as a kernel).
void reduce_step(const PatternSpec& spec, Buffer& acc, const Buffer& in, size_t offset,
                 size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const double a = load_element(spec.type, acc.data(), i);
    const double b = load_element(spec.type, in.data(), offset + i);
    double r = 0;
    switch (spec.op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: r = a + b; break;
      case ReduceOp::kProd: r = a * b; break;
      case ReduceOp::kMax: r = std::max(a, b); break;
      case ReduceOp::kMin: r = std::min(a, b); break;
    }
    store_element(spec.type, acc.data(), i, r);
  }
}

// The reduction over ranks of inputs[q][offset, offset + count) in the order `order`.
Buffer reduce_over(const PatternSpec& spec, const std::vector<Buffer>& inputs,
                   const std::vector<int>& order, size_t offset, size_t count) {
  const size_t ts = data_type_size(spec.type);
  Buffer acc(std::max<size_t>(count, 1) * ts);
  std::memcpy(acc.data(), inputs[order[0]].data() + offset * ts, count * ts);
  for (size_t k = 1; k < order.size(); ++k) reduce_step(spec, acc, inputs[order[k]], offset, count);
  if (spec.op == ReduceOp::kAvg) {
    for (size_t i = 0; i < count; ++i) {
      double v = load_element(spec.type, acc.data(), i) / spec.nranks;
      if (!collectives::is_floating(spec.type)) v = std::trunc(v);
      store_element(spec.type, acc.data(), i, v);
    }
  }
  return acc;
}

// What a correct collective leaves in `rank`'s output.
Buffer simulate(const PatternSpec& spec, const Shape& shape, int rank,
                const std::vector<int>& order) {
  const int n = spec.nranks;
  const size_t ts = data_type_size(spec.type);
  std::vector<Buffer> inputs;
  for (int q = 0; q < n; ++q) inputs.push_back(input_of(spec, q, shape.send_count));
  Buffer out(std::max<size_t>(shape.recv_count, 1) * ts);
  switch (spec.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce: out = reduce_over(spec, inputs, order, 0, shape.count); break;
    case Collective::kReduceScatter:
      out = reduce_over(spec, inputs, order, rank * shape.count, shape.count);
      break;
    case Collective::kBroadcast:
      std::memcpy(out.data(), inputs[spec.root].data(), shape.count * ts);
      break;
    case Collective::kAllGather:
      for (int q = 0; q < n; ++q) {
        std::memcpy(out.data() + q * shape.count * ts, inputs[q].data(), shape.count * ts);
      }
      break;
    case Collective::kAllToAll:
      for (int q = 0; q < n; ++q) {
        std::memcpy(out.data() + q * shape.count * ts,
                    inputs[q].data() + rank * shape.count * ts, shape.count * ts);
      }
      break;
    case Collective::kSendRecv:
      std::memcpy(out.data(), inputs[(rank + n - 1) % n].data(), shape.count * ts);
      break;
    case Collective::kBarrier: break;
  }
  return out;
}

const std::vector<Collective> kCollectives = {
    Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce, Collective::kAllGather,
    Collective::kReduceScatter, Collective::kAllToAll, Collective::kSendRecv};

TEST(CollPattern, CorrectResultsOfAnyOrderCountZero) {
  for (Collective c : kCollectives) {
    for (int t = 0; t < collectives::kNumDataTypes; ++t) {
      const auto type = static_cast<DataType>(t);
      for (int o = 0; o < collectives::kNumReduceOps; ++o) {
        const auto op = static_cast<ReduceOp>(o);
        if (!has_reduce_op(c) && op != ReduceOp::kSum) continue;
        for (int n : {1, 2, 3, 4, 8}) {
          const PatternSpec spec{c, type, op, n, n - 1};
          const Shape shape = shape_for(c, 401 * data_type_size(type), type, n);
          std::vector<int> forward(static_cast<size_t>(n));
          std::iota(forward.begin(), forward.end(), 0);
          std::vector<int> backward(forward.rbegin(), forward.rend());
          for (const auto& order : {forward, backward}) {
            for (int rank = 0; rank < n; ++rank) {
              const Buffer out = simulate(spec, shape, rank, order);
              EXPECT_EQ(count_wrong(spec, rank, shape, out.data()), 0U)
                  << collectives::to_string(c) << " " << collectives::to_string(type) << " "
                  << collectives::to_string(op) << " n=" << n << " rank " << rank;
            }
          }
        }
      }
    }
  }
}

TEST(CollPattern, PartialSumsStayExactAtManyRanks) {
  // bfloat16 holds integers exactly only up to 256: at 64 ranks every value must be small
  // enough that the whole sum (and so every partial sum) stays there.
  for (auto [type, cap] : {std::pair{DataType::kBfloat16, 256.0}, {DataType::kFloat16, 2048.0},
                           {DataType::kInt8, 127.0}, {DataType::kUint8, 254.0}}) {
    for (int n : {8, 64, 100}) {
      const PatternSpec spec{Collective::kAllReduce, type, ReduceOp::kSum, n, 0};
      for (size_t i = 0; i < 2000; ++i) EXPECT_LE(reduced_value(spec, i), cap) << n;
      const PatternSpec prod{Collective::kAllReduce, type, ReduceOp::kProd, n, 0};
      for (size_t i = 0; i < 2000; ++i) {
        EXPECT_LE(reduced_value(prod, i), type == DataType::kFloat16 ? 32768.0 : 1e300);
      }
    }
  }
  // The pattern varies with rank and index (a swapped block must show).
  const PatternSpec spec{Collective::kAllGather, DataType::kFloat32, ReduceOp::kSum, 4, 0};
  int same = 0;
  for (size_t i = 0; i < 1000; ++i) same += pattern_value(spec, 0, i) == pattern_value(spec, 1, i);
  EXPECT_LT(same, 20);
}

TEST(CollPattern, FaultsAreCounted) {
  for (int t = 0; t < collectives::kNumDataTypes; ++t) {
    const auto type = static_cast<DataType>(t);
    const size_t ts = data_type_size(type);
    const int n = 4;
    std::vector<int> order{0, 1, 2, 3};

    // Allreduce: two elements flipped to a wrong value.
    PatternSpec spec{Collective::kAllReduce, type, ReduceOp::kSum, n, 0};
    Shape shape = shape_for(spec.collective, 1000 * ts, type, n);
    Buffer out = simulate(spec, shape, 1, order);
    store_element(type, out.data(), 7, load_element(type, out.data(), 7) + 1);
    store_element(type, out.data(), 999, load_element(type, out.data(), 999) + 3);
    EXPECT_EQ(count_wrong(spec, 1, shape, out.data()), 2U) << collectives::to_string(type);

    // Allgather: ranks 1 and 2's blocks swapped.
    spec.collective = Collective::kAllGather;
    shape = shape_for(spec.collective, 1000 * ts, type, n);
    out = simulate(spec, shape, 0, order);
    Buffer swapped = out;
    std::memcpy(swapped.data() + shape.count * ts, out.data() + 2 * shape.count * ts,
                shape.count * ts);
    std::memcpy(swapped.data() + 2 * shape.count * ts, out.data() + shape.count * ts,
                shape.count * ts);
    EXPECT_GT(count_wrong(spec, 0, shape, swapped.data()), shape.count)
        << collectives::to_string(type);

    // Nothing written: every element of the poisoned output is wrong.
    for (Collective c : kCollectives) {
      spec.collective = c;
      shape = shape_for(c, 1000 * ts, type, n);
      Buffer poisoned(shape.recv_count * ts);
      poison_output(type, poisoned.data(), shape.recv_count);
      EXPECT_EQ(count_wrong(spec, 0, shape, poisoned.data()), shape.recv_count)
          << collectives::to_string(c) << " " << collectives::to_string(type);
    }
  }
  // Reduce: only the root's output is specified.
  const PatternSpec reduce{Collective::kReduce, DataType::kInt32, ReduceOp::kMax, 3, 1};
  const Shape shape = shape_for(Collective::kReduce, 400, DataType::kInt32, 3);
  Buffer poisoned(400);
  poison_output(DataType::kInt32, poisoned.data(), shape.recv_count);
  EXPECT_EQ(count_wrong(reduce, 0, shape, poisoned.data()), 0U);
  EXPECT_EQ(count_wrong(reduce, 1, shape, poisoned.data()), 100U);
}

TEST(CollPattern, AverageOfFloatsHasATolerance) {
  const PatternSpec spec{Collective::kAllReduce, DataType::kFloat32, ReduceOp::kAvg, 3, 0};
  const Shape shape = shape_for(spec.collective, 400, spec.type, 3);
  Buffer out = simulate(spec, shape, 0, {2, 0, 1});
  // One ulp off (a different but legal division order) still passes; 1 % off does not.
  float v = 0;
  std::memcpy(&v, out.data(), 4);
  float next = std::nextafter(v, 1e9F);
  std::memcpy(out.data(), &next, 4);
  EXPECT_EQ(count_wrong(spec, 0, shape, out.data()), 0U);
  const float off = v * 1.01F + 0.01F;
  std::memcpy(out.data(), &off, 4);
  EXPECT_EQ(count_wrong(spec, 0, shape, out.data()), 1U);
}

TEST(CollPattern, ReferenceConversions) {
  EXPECT_EQ(reference_float_to_half(1.0F), 0x3C00);
  EXPECT_EQ(reference_float_to_half(-2.0F), 0xC000);
  EXPECT_EQ(reference_float_to_half(65504.0F), 0x7BFF);
  EXPECT_EQ(reference_float_to_half(65520.0F), 0x7C00);  // rounds up to Inf
  EXPECT_EQ(reference_float_to_half(2049.0F), 0x6800);   // tie to even: 2048
  EXPECT_EQ(reference_float_to_half(2051.0F), 0x6802);   // tie to even: 2052
  EXPECT_EQ(reference_float_to_half(std::ldexp(1.0F, -24)), 0x0001);
  EXPECT_EQ(reference_float_to_half(std::ldexp(1.0F, -26)), 0x0000);
  EXPECT_TRUE(std::isnan(reference_half_to_float(
      reference_float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(reference_half_to_float(0x0001), std::ldexp(1.0F, -24));
  EXPECT_EQ(reference_half_to_float(0x3555), 0.333251953125F);
  EXPECT_EQ(reference_float_to_bfloat16(1.0F), 0x3F80);
  EXPECT_EQ(reference_float_to_bfloat16(257.0F), 0x4380);  // tie to even: 256
  EXPECT_EQ(reference_float_to_bfloat16(259.0F), 0x4382);  // tie to even: 260
  EXPECT_EQ(reference_bfloat16_to_float(0x4382), 260.0F);
  for (int v = -2048; v <= 2048; v += 7) {
    EXPECT_EQ(reference_half_to_float(reference_float_to_half(static_cast<float>(v))), v);
  }
  // Integers wrap as two's complement when stored.
  unsigned char b[8];
  store_element(DataType::kInt8, b, 0, 130);
  EXPECT_EQ(load_element(DataType::kInt8, b, 0), -126);
  store_element(DataType::kUint8, b, 0, 256 + 5);
  EXPECT_EQ(load_element(DataType::kUint8, b, 0), 5);
}

// -------------------------------------------------------------------------------- report

TEST(CollReport, TableAndJsonCarryEveryColumn) {
  RunInfo info;
  info.collective = "allreduce";
  info.nranks = 4;
  info.sites = 2;
  info.ranks_per_site = 2;
  info.topology = "2 sites x 2 ranks (a: 0 1, b: 2 3)";
  info.intra_backend = "shm";
  info.inter_backend = "udp";
  info.algorithm = "auto";
  std::vector<Row> rows;
  Row a = make_row(Collective::kAllReduce,
                   shape_for(Collective::kAllReduce, 8, DataType::kFloat32, 4),
                   DataType::kFloat32, ReduceOp::kSum, 0, 4, 18.764);
  a.wrong = 0;
  a.algorithm = "tree";
  rows.push_back(a);
  Row b = make_row(Collective::kAllReduce,
                   shape_for(Collective::kAllReduce, 64 << 20, DataType::kFloat32, 4),
                   DataType::kFloat32, ReduceOp::kSum, 0, 4, 2'500'000);
  b.wrong = 0;
  b.algorithm = "hier";
  b.chunk_bytes = 4 << 20;
  rows.push_back(b);

  const std::string header = table_header(info);
  for (const char* col : {"size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                          "#wrong", "2 sites x 2 ranks", "inter udp"}) {
    EXPECT_NE(header.find(col), std::string::npos) << col;
  }
  EXPECT_EQ(header.front(), '#');
  EXPECT_EQ(table_row(a), "           8             2     float     sum      -1    18.76    0.00"
                          "    0.00       0   tree          0\n");
  EXPECT_EQ(format_time_us(123.456), "  123.5");
  EXPECT_EQ(format_time_us(2'500'000), "2500000");
  EXPECT_NE(table_footer(rows).find("# Out of bounds values : 0 OK"), std::string::npos);
  EXPECT_NE(table_footer(rows).find("# Avg bus bandwidth"), std::string::npos);
  Row bad = b;
  bad.wrong = 5;
  EXPECT_NE(table_footer({a, bad}).find(": 5 FAILED"), std::string::npos);
  Row unchecked = a;
  unchecked.wrong.reset();
  EXPECT_NE(table_row(unchecked).find("N/A"), std::string::npos);

  const auto doc = report_json(info, rows, std::nullopt);
  EXPECT_EQ(doc.at("schema").as_string(), "detwan-bench-collective");
  EXPECT_EQ(doc.at("version").as_int64(), 1);
  EXPECT_EQ(doc.at("nranks").as_int64(), 4);
  EXPECT_EQ(doc.at("sites").as_int64(), 2);
  EXPECT_EQ(doc.at("ranks_per_site").as_int64(), 2);
  EXPECT_EQ(doc.at("backend").at("inter").as_string(), "udp");
  EXPECT_TRUE(doc.at("path").is_null());
  EXPECT_TRUE(doc.at("error").is_null());
  const auto& r = doc.at("rows").as_array().at(1).as_object();
  for (const char* key : {"size_bytes", "count", "type", "redop", "root", "time_us",
                          "algbw_GBps", "busbw_GBps", "wrong", "algorithm", "chunk_bytes"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  EXPECT_EQ(r.at("size_bytes").to_number<uint64_t>(), 64U << 20);
  EXPECT_DOUBLE_EQ(r.at("busbw_GBps").as_double(), b.busbw_gbps);
  EXPECT_EQ(r.at("algorithm").as_string(), "hier");
  EXPECT_EQ(report_json(info, {}, "rank 2: gone").at("error").as_string(), "rank 2: gone");
}

}  // namespace
}  // namespace detwan::bench
