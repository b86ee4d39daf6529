// mpi-allreduce: the allreduce sweep of sweep.h over Open MPI's MPI_Allreduce (the library's
// own algorithm selection, as an MPI user gets it). Launch it with mpirun; the transport is
// whatever mpirun selects (tools/lab/compare.py passes --mca btl tcp,self).
//
// Usage: mpirun ... mpi-allreduce [-b 8 -e 64M -f 4 -n 20 -w 5 -c 1] [--json] [--timeout S]
// (--timeout is accepted for symmetry; MPI has no per-call timeout: the launcher enforces it.)
#include <exception>
#include <stdexcept>
#include <string>

#include <mpi.h>

#include "tools/bench/baselines/sweep.h"

namespace detwan::bench::baselines {
namespace {

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string(what) + ": " +
                           std::string(text, static_cast<size_t>(length)));
}

class MpiCollective final : public Collective {
 public:
  MpiCollective() {
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &nranks_), "MPI_Comm_size");
  }
  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] int nranks() const override { return nranks_; }

  void allreduce_sum(const float* in, float* out, size_t count) override {
    // MPI counts are int: split larger buffers (not reached below 8 GiB of floats).
    while (count > 0) {
      const size_t part = std::min<size_t>(count, 1u << 30);
      check_mpi(MPI_Allreduce(in, out, static_cast<int>(part), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                "MPI_Allreduce");
      in += part;
      out += part;
      count -= part;
    }
  }
  [[nodiscard]] double max_over_ranks(double value) override {
    double out = 0;
    check_mpi(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    return out;
  }
  [[nodiscard]] int64_t sum_over_ranks(int64_t value) override {
    int64_t out = 0;
    check_mpi(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD),
              "MPI_Allreduce");
    return out;
  }

 private:
  int rank_ = 0;
  int nranks_ = 1;
};

}  // namespace
}  // namespace detwan::bench::baselines

int main(int argc, char** argv) {
  using namespace detwan::bench::baselines;
  SweepOptions options;
  CLI::App app{"Open MPI allreduce sweep (nccl-tests options and output)", "mpi-allreduce"};
  add_sweep_options(app, options);
  app.allow_extras();  // mpirun may leave its own arguments behind
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "mpi_allreduce: MPI_Init failed\n");
    return 1;
  }
  // Errors come back as codes (and are reported) instead of aborting the job silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int status = 0;
  try {
    app.parse(argc, argv);
    MpiCollective coll;
    auto rows = run_sweep(options, coll);
    if (coll.rank() == 0) {
      char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
      int length = 0;
      MPI_Get_library_version(version, &length);
      std::string library(version, static_cast<size_t>(length));
      if (auto cut = library.find(','); cut != std::string::npos) library.resize(cut);
      print_report(options, "mpi", coll.nranks(), rows,
                   boost::json::object{{"library", library},
                                       {"transport", "btl (see the launcher's --mca btl)"},
                                       {"algorithm", "MPI_Allreduce (coll tuned default)"}});
    }
  } catch (const CLI::ParseError& e) {
    status = app.exit(e);
  } catch (const std::exception& e) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    print_error(options, "mpi", "rank " + std::to_string(rank) + ": " + e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
    status = 1;
  }
  MPI_Finalize();
  return status;
}
