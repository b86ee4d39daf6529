// detwan-bench's collective sweep: the options nccl-tests users type, the sizes and counts
// nccl-tests derives from them, the busbw factors, and the check: a correct result of any
// reduction order must count 0 wrong, and the faults a broken collective makes must be counted.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <algorithm>

#include "tools/bench/coll_local.h"
#include "tools/bench/coll_options.h"
#include "tools/bench/coll_pattern.h"
#include "tools/bench/coll_report.h"
#include "tools/bench/coll_sizes.h"

namespace detwan::bench {
namespace {

using collectives::Algorithm;
using collectives::data_type_size;

common::Result<ParsedArgs> parse(std::vector<std::string> args,
                                 std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), "detwan-bench");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  auto lookup = [env = std::move(env)](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  return parse_collective_args(static_cast<int>(argv.size()), argv.data(), lookup);
}

// ---------------------------------------------------------------------------------- options

TEST(CollOptions, DefaultsAreNcclTestsAndOneLocalRank) {
  auto p = parse({"allreduce"});
  ASSERT_TRUE(p) << p.error().message;
  const auto& o = p->options;
  EXPECT_EQ(o.collective, Collective::kAllReduce);
  EXPECT_EQ(o.sweep.min_bytes, 8U);
  EXPECT_EQ(o.sweep.max_bytes, 64U << 20);
  EXPECT_EQ(o.sweep.step_factor, 2U);
  EXPECT_EQ(o.types, std::vector<DataType>{DataType::kFloat32});
  EXPECT_EQ(o.ops, std::vector<ReduceOp>{ReduceOp::kSum});
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmup_iters, 5);
  EXPECT_TRUE(o.check);
  EXPECT_FALSE(o.algorithm_set);
  EXPECT_EQ(o.chunk_bytes, -1);
  EXPECT_EQ(o.mode, LaunchMode::kLocal);
  EXPECT_EQ(o.local_ranks, 1);
  EXPECT_EQ(o.nranks, 1);
}

TEST(CollOptions, ShortAndLongFormsAsNcclTests) {
  auto p = parse({"allreduce", "-b", "1k", "-e", "64M", "-f", "4", "-d", "all", "-o", "all",
                  "-n", "3", "-w", "1", "-c", "0", "-a", "hier", "--chunk", "1m",
                  "--deterministic", "--json", "--local", "4", "--sites", "2"});
  ASSERT_TRUE(p) << p.error().message;
  const auto& o = p->options;
  EXPECT_EQ(o.sweep.min_bytes, 1024U);
  EXPECT_EQ(o.sweep.max_bytes, 64U << 20);
  EXPECT_EQ(o.sweep.step_factor, 4U);
  EXPECT_EQ(o.types.size(), 10U);
  EXPECT_EQ(o.ops.size(), 5U);
  EXPECT_EQ(o.iters, 3);
  EXPECT_EQ(o.warmup_iters, 1);
  EXPECT_FALSE(o.check);
  EXPECT_TRUE(o.algorithm_set);
  EXPECT_EQ(o.algorithm, Algorithm::kHierarchical);
  EXPECT_EQ(o.chunk_bytes, 1 << 20);
  EXPECT_TRUE(o.deterministic);
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.local_ranks, 4);
  EXPECT_EQ(o.local_sites, 2);

  auto l = parse({"broadcast", "--minbytes", "16", "--maxbytes", "1024", "--stepbytes", "100",
                  "--datatype", "bf16", "--root", "2", "--iters", "7", "--warmup_iters", "0",
                  "--local", "3", "--op", "all"});
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->options.sweep.step_bytes, 100U);
  EXPECT_EQ(l->options.types, std::vector<DataType>{DataType::kBfloat16});
  EXPECT_EQ(l->options.root, 2);
  EXPECT_EQ(l->options.iters, 7);
  EXPECT_EQ(l->options.warmup_iters, 0);
  // Broadcast has no reduce op: one pass, printed as "none".
  EXPECT_EQ(l->options.ops.size(), 1U);
}

TEST(CollOptions, AggregatedOperationsInFlight) {
  auto p = parse({"allreduce", "-m", "8", "--inflight", "4", "--local", "2"});
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->options.agg_iters, 8);
  EXPECT_EQ(p->options.inflight_ops, 4);
  auto d = parse({"allreduce"});
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->options.agg_iters, 1);
  EXPECT_EQ(d->options.inflight_ops, 0);  // not given: the environment's
  for (const auto& [bad, name] :
       {std::pair{std::vector<std::string>{"allreduce", "--inflight", "9"}, "--inflight"},
        std::pair{std::vector<std::string>{"allreduce", "-m", "0"}, "--agg_iters"}}) {
    auto b = parse(bad);
    ASSERT_FALSE(b) << name;
    EXPECT_NE(b.error().message.find(name), std::string::npos) << b.error().message;
  }
}

TEST(CollOptions, OneRankFromCommandLineOrEnvironment) {
  auto p = parse({"allgather", "--rank", "2", "--nranks", "4", "--id", "tcp://10.10.1.2:5500",
                  "--site", "b", "--wan-rate", "200mbit"});
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->options.mode, LaunchMode::kRank);
  EXPECT_EQ(p->options.rank, 2);
  EXPECT_EQ(p->options.nranks, 4);
  EXPECT_EQ(p->options.id, "tcp://10.10.1.2:5500");
  EXPECT_EQ(p->options.site, "b");
  EXPECT_EQ(p->options.wan_rate_bps, 200'000'000);

  auto e = parse({"allreduce"}, {{"DETWAN_RANK", "1"}, {"DETWAN_NRANKS", "2"},
                                 {"DETWAN_ID", "file:///tmp/x"}});
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(e->options.mode, LaunchMode::kRank);
  EXPECT_EQ(e->options.rank, 1);
  EXPECT_EQ(e->options.id, "file:///tmp/x");
  // The command line wins over the environment.
  auto both = parse({"allreduce", "--rank", "0"}, {{"DETWAN_RANK", "1"}, {"DETWAN_NRANKS", "2"},
                                                    {"DETWAN_ID", "file:///tmp/x"}});
  ASSERT_TRUE(both) << both.error().message;
  EXPECT_EQ(both->options.rank, 0);
}

TEST(CollOptions, ErrorsNameTheOption) {
  const auto error_of = [](std::vector<std::string> args,
                           std::map<std::string, std::string> env = {}) {
    auto p = parse(std::move(args), std::move(env));
    return p ? std::string("(accepted)") : p.error().message;
  };
  EXPECT_NE(error_of({"allreduce", "-d", "float8"}).find("-d/--datatype"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "-o", "xor"}).find("-o/--op"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "-b", "1m", "-e", "1k"}).find("--maxbytes"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "-f", "1"}).find("--stepfactor"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "-b", "8x"}).find("-b/--minbytes"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "-c", "2"}).find("--check"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "-n", "0"}).find("--iters"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "-a", "magic"}).find("-a/--algo"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "--rank", "1"}).find("missing: nranks id"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "--rank", "4", "--nranks", "4", "--id", "file:///x"})
                .find("--rank 4 of --nranks 4"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "--local", "2", "--rank", "0"}).find("--local"),
            std::string::npos);
  EXPECT_NE(error_of({"allreduce", "--local", "3", "--sites", "2"}).find("--sites 2"),
            std::string::npos);
  EXPECT_NE(error_of({"reduce", "--local", "2", "-r", "2"}).find("-r/--root 2"),
            std::string::npos);
  EXPECT_NE(error_of({"allreduce", "--no-such-option"}).find("no-such-option"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "--rank", "x", "--nranks", "2", "--id", "file:///x"})
                .find("expected an integer"), std::string::npos);
  EXPECT_FALSE(parse({"gather"}));
  auto help = parse({"alltoall", "--help"});
  ASSERT_TRUE(help);
  EXPECT_TRUE(help->help);
  EXPECT_NE(help->help_text.find("--minbytes"), std::string::npos);
}

TEST(CollOptions, SiteSizesGiveSitesOfDifferentSizes) {
  const auto error_of = [](std::vector<std::string> args) {
    auto p = parse(std::move(args));
    return p ? std::string("(accepted)") : p.error().message;
  };
  auto p = parse({"allreduce", "--local", "4", "--site-sizes", "3,1"});
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->options.local_sites, 2);
  EXPECT_EQ(p->options.local_site_sizes, (std::vector<int>{3, 1}));
  // Each launched rank drops --site-sizes and gets its own site.
  const auto a = local_rank_args({"allreduce", "--local", "4", "--site-sizes", "3,1"},
                                 p->options, 3, "file:///tmp/d");
  EXPECT_EQ(std::count(a.begin(), a.end(), "--site-sizes"), 0);
  EXPECT_EQ(a[std::find(a.begin(), a.end(), "--site") - a.begin() + 1], "b");
  EXPECT_NE(error_of({"allreduce", "--local", "4", "--site-sizes", "3,2"}).find("summing to"),
            std::string::npos);
  EXPECT_NE(error_of({"allreduce", "--local", "4", "--site-sizes", "4,0"}).find("'0'"),
            std::string::npos);
  EXPECT_NE(error_of({"allreduce", "--local", "4", "--site-sizes", "3,,1"}).find("''"),
            std::string::npos);
  EXPECT_NE(error_of({"allreduce", "--local", "4", "--sites", "3", "--site-sizes", "3,1"})
                .find("names 2 sites"), std::string::npos);
  EXPECT_NE(error_of({"allreduce", "--rank", "0", "--nranks", "2", "--id", "file:///x",
                      "--site-sizes", "1,1"}).find("--site-sizes goes with --local"),
            std::string::npos);
}

TEST(CollOptions, LocalRanksGetTheirOwnArguments) {
  CollBenchOptions o;
  o.local_ranks = 4;
  o.local_sites = 2;
  const std::vector<std::string> args{"allreduce", "-b", "8", "--local", "4", "--sites=2",
                                      "--timeout", "60", "--json"};
  const auto a = local_rank_args(args, o, 3, "file:///tmp/d");
  const std::vector<std::string> want{"allreduce", "-b", "8", "--json", "--rank", "3",
                                      "--nranks", "4", "--id", "file:///tmp/d", "--site", "b",
                                      "--listen-host", "127.0.0.1"};
  EXPECT_EQ(a, want);
  EXPECT_EQ(local_site_name(0, 8, 2), "a");
  EXPECT_EQ(local_site_name(3, 8, 2), "a");
  EXPECT_EQ(local_site_name(4, 8, 2), "b");
  EXPECT_EQ(local_site_name(5, 6, 3), "c");
  // Uneven sites: 3 + 1.
  EXPECT_EQ(local_site_name(2, 4, 2, {3, 1}), "a");
  EXPECT_EQ(local_site_name(3, 4, 2, {3, 1}), "b");
  EXPECT_EQ(local_site_name(0, 4, 2, {1, 3}), "a");
  EXPECT_EQ(local_site_name(1, 4, 2, {1, 3}), "b");
  // What the launched rank parses back: one rank of the job, in its site.
  std::vector<std::string> full = a;
  auto p = parse(full);
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->options.mode, LaunchMode::kRank);
  EXPECT_EQ(p->options.rank, 3);
  EXPECT_EQ(p->options.site, "b");
}

// ---------------------------------------------------------------------------- sizes, busbw

TEST(CollSizes, SweepLikeNcclTests) {
  auto f4 = sweep_sizes({8, 64 << 20, 4, 0});
  ASSERT_TRUE(f4);
  ASSERT_EQ(f4->size(), 12U);
  EXPECT_EQ(f4->front(), 8U);
  EXPECT_EQ((*f4)[1], 32U);
  EXPECT_EQ(f4->back(), 32U << 20);  // 8 * 4^11 = 2^25 <= 2^26 < 2^27
  auto f2 = sweep_sizes({8, 64 << 20, 2, 0});
  ASSERT_TRUE(f2);
  EXPECT_EQ(f2->size(), 24U);
  EXPECT_EQ(f2->back(), 64U << 20);
  auto step = sweep_sizes({100, 350, 2, 100});
  ASSERT_TRUE(step);
  EXPECT_EQ(*step, (std::vector<uint64_t>{100, 200, 300}));
  auto zero = sweep_sizes({0, 4, 2, 0});
  ASSERT_TRUE(zero);
  EXPECT_EQ(*zero, (std::vector<uint64_t>{0, 1, 2, 4}));
  auto one = sweep_sizes({64, 64, 1, 0});
  ASSERT_TRUE(one);
  EXPECT_EQ(*one, std::vector<uint64_t>{64});
  auto huge = sweep_sizes({1ULL << 62, ~0ULL, 8, 0});  // the next step would overflow
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->size(), 1U);
  EXPECT_FALSE(sweep_sizes({8, 1ULL << 40, 2, 1}));  // too many rows
}

TEST(CollSizes, CountsAndSizeColumnAsNcclTests) {
  const auto s = shape_for(Collective::kAllReduce, 1000, DataType::kFloat32, 3);
  EXPECT_EQ(s.count, 250U);
  EXPECT_EQ(s.size_bytes, 1000U);
  const auto odd = shape_for(Collective::kAllReduce, 1001, DataType::kFloat64, 3);
  EXPECT_EQ(odd.count, 125U);
  EXPECT_EQ(odd.size_bytes, 1000U);
  // allgather: count per rank, size = the whole output.
  const auto ag = shape_for(Collective::kAllGather, 1000, DataType::kFloat32, 3);
  EXPECT_EQ(ag.count, 83U);
  EXPECT_EQ(ag.send_count, 83U);
  EXPECT_EQ(ag.recv_count, 249U);
  EXPECT_EQ(ag.size_bytes, 996U);
  // reducescatter: count per rank, size = the whole input.
  const auto rs = shape_for(Collective::kReduceScatter, 1000, DataType::kFloat32, 3);
  EXPECT_EQ(rs.count, 83U);
  EXPECT_EQ(rs.send_count, 249U);
  EXPECT_EQ(rs.recv_count, 83U);
  EXPECT_EQ(rs.size_bytes, 996U);
  const auto a2a = shape_for(Collective::kAllToAll, 1000, DataType::kInt8, 4);
  EXPECT_EQ(a2a.count, 250U);
  EXPECT_EQ(a2a.send_count, 1000U);
  EXPECT_EQ(a2a.recv_count, 1000U);
  const auto tiny = shape_for(Collective::kAllGather, 8, DataType::kFloat32, 4);
  EXPECT_EQ(tiny.count, 0U);
  EXPECT_EQ(tiny.size_bytes, 0U);
  const auto bc = shape_for(Collective::kBroadcast, 6, DataType::kFloat32, 4);
  EXPECT_EQ(bc.count, 1U);
  EXPECT_EQ(bc.size_bytes, 4U);
}

TEST(CollSizes, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllToAll, 2), 0.5);
  for (auto c : {Collective::kBroadcast, Collective::kReduce, Collective::kSendRecv}) {
    EXPECT_DOUBLE_EQ(bus_factor(c, 4), 1.0);
  }
  EXPECT_DOUBLE_EQ(algbw_gbps(1'000'000'000, 1e6), 1.0);
  EXPECT_DOUBLE_EQ(algbw_gbps(1000, 0), 0.0);
  const Row row = make_row(Collective::kAllReduce,
                           shape_for(Collective::kAllReduce, 64 << 20, DataType::kFloat32, 4),
                           DataType::kFloat32, ReduceOp::kSum, 0, 4, 1e6);
  EXPECT_DOUBLE_EQ(row.algbw_gbps, (64 << 20) / 1e9);
  EXPECT_DOUBLE_EQ(row.busbw_gbps, row.algbw_gbps * 1.5);
  EXPECT_EQ(row.redop, "sum");
  EXPECT_EQ(row.root, -1);
  const Row ag = make_row(Collective::kAllGather,
                          shape_for(Collective::kAllGather, 1024, DataType::kInt32, 4),
                          DataType::kInt32, ReduceOp::kMax, 0, 4, 10);
  EXPECT_EQ(ag.redop, "none");
  const Row rd = make_row(Collective::kReduce,
                          shape_for(Collective::kReduce, 1024, DataType::kInt32, 4),
                          DataType::kInt32, ReduceOp::kMax, 3, 4, 10);
  EXPECT_EQ(rd.root, 3);
}

}  // namespace
}  // namespace detwan::bench
