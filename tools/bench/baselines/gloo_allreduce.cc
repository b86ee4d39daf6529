// gloo-allreduce: the allreduce sweep of sweep.h over gloo's standard allreduce
// (gloo::allreduce with AllreduceOptions, algorithm left UNSPECIFIED = ring: what
// torch.distributed's gloo backend calls for a dense CPU tensor) on the tcp transport.
//
// Rendezvous: gloo::rendezvous::FileStore in --store DIR, a directory every rank can see (the
// lab's namespaces share the filesystem); it must be empty at the start of a run. Each rank
// binds its tcp device to --iface-addr, the address the other ranks reach it at.
//
// Usage: gloo-allreduce --rank R --nranks N --store DIR --iface-addr ADDR [-b 8 -e 64M -f 4
//        -n 20 -w 5 -c 1] [--json] [--timeout S]
#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include <gloo/allreduce.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/socket.h>

#include "tools/bench/baselines/sweep.h"

namespace detwan::bench::baselines {
namespace {

class GlooCollective final : public Collective {
 public:
  explicit GlooCollective(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}

  [[nodiscard]] int rank() const override { return context_->rank; }
  [[nodiscard]] int nranks() const override { return context_->size; }

  void allreduce_sum(const float* in, float* out, size_t count) override {
    gloo::AllreduceOptions opts(context_);
    // gloo only reads the input; its API takes a non-const pointer.
    opts.setInput(const_cast<float*>(in), count);
    opts.setOutput(out, count);
    opts.setReduceFunction(
        [](void* c, const void* a, const void* b, size_t n) { gloo::sum<float>(c, a, b, n); });
    opts.setTag(next_tag());
    gloo::allreduce(opts);
  }

  [[nodiscard]] double max_over_ranks(double value) override {
    double in = value;
    double out = 0;
    gloo::AllreduceOptions opts(context_);
    opts.setInput(&in, 1);
    opts.setOutput(&out, 1);
    opts.setReduceFunction(
        [](void* c, const void* a, const void* b, size_t n) { gloo::max<double>(c, a, b, n); });
    opts.setTag(next_tag());
    gloo::allreduce(opts);
    return out;
  }

  [[nodiscard]] int64_t sum_over_ranks(int64_t value) override {
    int64_t in = value;
    int64_t out = 0;
    gloo::AllreduceOptions opts(context_);
    opts.setInput(&in, 1);
    opts.setOutput(&out, 1);
    opts.setReduceFunction(
        [](void* c, const void* a, const void* b, size_t n) { gloo::sum<int64_t>(c, a, b, n); });
    opts.setTag(next_tag());
    gloo::allreduce(opts);
    return out;
  }

 private:
  uint32_t next_tag() { return tag_++ & 0xffffff; }

  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;
};

}  // namespace
}  // namespace detwan::bench::baselines

int main(int argc, char** argv) {
  using namespace detwan::bench::baselines;
  SweepOptions options;
  int rank = -1;
  int nranks = -1;
  std::string store_dir;
  std::string iface_addr = "127.0.0.1";
  CLI::App app{"gloo allreduce sweep (nccl-tests options and output)", "gloo-allreduce"};
  add_sweep_options(app, options);
  app.add_option("--rank", rank, "this rank")->required()->check(CLI::Range(0, 1 << 16));
  app.add_option("--nranks", nranks, "number of ranks")->required()->check(CLI::Range(1, 1 << 16));
  app.add_option("--store", store_dir, "empty directory shared by all ranks (FileStore)")
      ->required();
  app.add_option("--iface-addr", iface_addr, "IPv4 address this rank binds and is reached at");
  CLI11_PARSE(app, argc, argv);
  if (rank >= nranks) {
    print_error(options, "gloo",
                "--rank " + std::to_string(rank) + " must be < --nranks " + std::to_string(nranks));
    return 2;
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = iface_addr;
    attr.ai_family = AF_INET;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
    context->setTimeout(std::chrono::seconds(options.timeout_s));
    context->connectFullMesh(store, device);
    GlooCollective coll(context);
    auto rows = run_sweep(options, coll);
    if (rank == 0) {
      print_report(options, "gloo", nranks, rows,
                   boost::json::object{{"library", "gloo " + std::to_string(GLOO_VERSION_MAJOR) +
                                                       "." + std::to_string(GLOO_VERSION_MINOR)},
                                       {"transport", "tcp"},
                                       {"algorithm", "gloo::allreduce (ring)"}});
    }
  } catch (const std::exception& e) {
    print_error(options, "gloo", "rank " + std::to_string(rank) + ": " + e.what());
    return 1;
  }
  return 0;
}
