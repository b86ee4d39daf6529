// Replays every file of a fuzz target's seed corpus (DETWAN_FUZZ_CORPUS_DIR) through its
// libFuzzer entry point, built with g++ as a plain unit test: a violated invariant aborts the
// test, a crash input added to the corpus stays fixed. The corpus has at least 3 files.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size);  // NOLINT

namespace {

TEST(FuzzCorpus, EveryFilePassesTheFuzzTarget) {
  namespace fs = std::filesystem;
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(DETWAN_FUZZ_CORPUS_DIR)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
    std::fprintf(stderr, "replaying %s (%zu bytes)\n", entry.path().filename().c_str(),
                 bytes.size());
    EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0) << entry.path();
    ++files;
  }
  EXPECT_GE(files, 3u) << "seed corpus missing in " << DETWAN_FUZZ_CORPUS_DIR;
}

}  // namespace
