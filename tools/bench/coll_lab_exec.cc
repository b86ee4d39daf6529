#include "tools/bench/coll_lab_exec.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/bench/coll_sizes.h"

namespace detwan::bench {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";
constexpr const char* kModuleFile = "tools/lab/collectives.py";

fs::path find_repo(const fs::path& exe) {
  if (const char* env = std::getenv("DETWAN_REPO"); env != nullptr && *env != '\0') return env;
  for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    std::error_code ec;
    if (fs::exists(dir / kModuleFile, ec)) return dir;
    if (dir == dir.root_path()) break;
  }
  return {};
}

}  // namespace

bool wants_collective_lab(int argc, char** argv) {
  if (argc < 3 || !parse_bench_collective(argv[1])) return false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--lab") == 0) return true;
  }
  return false;
}

int exec_collective_lab(int argc, char** argv) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    std::fprintf(stderr, "detwan-bench: cannot find my own binary: %s\n", ec.message().c_str());
    return 1;
  }
  const fs::path repo = find_repo(exe);
  if (repo.empty() || !fs::exists(repo / kModuleFile, ec)) {
    std::fprintf(stderr, "detwan-bench: %s not found above %s; set DETWAN_REPO\n", kModuleFile,
                 exe.c_str());
    return 1;
  }
  // <build>/tools/bench/detwan-bench -> <build>
  const fs::path build = exe.parent_path().parent_path().parent_path();
  ::setenv("DETWAN_BENCH_BINARY", exe.c_str(), 1);
  ::setenv("DETWAN_BUILD_DIR", build.c_str(), 0);
  std::string pythonpath = (repo / "tools").string();
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') {
    pythonpath += ":" + std::string(old);
  }
  ::setenv("PYTHONPATH", pythonpath.c_str(), 1);

  std::vector<std::string> args{"python3", "-m", "lab.collectives"};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--lab") != 0) args.emplace_back(argv[i]);
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execv(kPython, cargs.data());
  std::fprintf(stderr, "detwan-bench: cannot run %s: %s\n", kPython, std::strerror(errno));
  return 1;
}

}  // namespace detwan::bench
