#include "tools/bench/lab_exec.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace detwan::bench {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";
fs::path find_repo(const fs::path& exe, const std::string& module_file) {
  if (const char* env = std::getenv("DETWAN_REPO"); env != nullptr && *env != '\0') return env;
  for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    std::error_code ec;
    if (fs::exists(dir / module_file, ec)) return dir;
    if (dir == dir.root_path()) break;
  }
  return {};
}

}  // namespace

int exec_lab(int argc, char** argv) { return exec_lab_module("transport", 2, argc, argv); }

int exec_lab_module(const std::string& module, int first_arg, int argc, char** argv) {
  const std::string module_file = "tools/lab/" + module + ".py";
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    std::fprintf(stderr, "detwan-bench: cannot find my own binary: %s\n", ec.message().c_str());
    return 1;
  }
  const fs::path repo = find_repo(exe, module_file);
  if (repo.empty() || !fs::exists(repo / module_file, ec)) {
    std::fprintf(stderr, "detwan-bench: %s not found above %s; set DETWAN_REPO\n",
                 module_file.c_str(), exe.c_str());
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

  std::vector<std::string> args{"python3", "-m", "lab." + module};
  for (int i = first_arg; i < argc; ++i) {
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
