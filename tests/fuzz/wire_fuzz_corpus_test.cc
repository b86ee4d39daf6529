// Replays every file of tests/fuzz/corpus/wire through the fuzz entry point (an invariant
// violation aborts this test), and checks the seed corpus still covers every decode drop
// reason, every packet type and both replay rejections, so the fuzzer starts from all of them.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/wire/control.h"
#include "dataplane/wire/header.h"
#include "dataplane/wire/replay_window.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size);  // NOLINT

namespace detwan::dataplane::wire {
namespace {

namespace fs = std::filesystem;

struct CorpusFile {
  std::string name;
  std::vector<uint8_t> bytes;
};

std::vector<CorpusFile> load_corpus() {
  std::vector<CorpusFile> files;
  for (const auto& entry : fs::directory_iterator(DETWAN_FUZZ_CORPUS_DIR)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    files.push_back({entry.path().filename().string(),
                     std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {})});
  }
  return files;
}

std::span<const std::byte> as_bytes(const std::vector<uint8_t>& v) {
  return std::as_bytes(std::span<const uint8_t>(v));
}

TEST(WireFuzzCorpus, EveryFilePassesTheFuzzTarget) {
  const auto files = load_corpus();
  ASSERT_GE(files.size(), 20u) << "corpus missing in " << DETWAN_FUZZ_CORPUS_DIR;
  for (const CorpusFile& f : files) {
    std::fprintf(stderr, "replaying %s (%zu bytes)\n", f.name.c_str(), f.bytes.size());
    EXPECT_EQ(LLVMFuzzerTestOneInput(f.bytes.data(), f.bytes.size()), 0) << f.name;
  }
}

TEST(WireFuzzCorpus, SeedsCoverEveryReasonAndType) {
  std::set<DropReason> reasons;
  std::set<std::string> kinds;
  bool replay_duplicate = false;
  bool replay_too_old = false;
  for (const CorpusFile& f : load_corpus()) {
    const auto d = decode(as_bytes(f.bytes));
    if (!d) {
      reasons.insert(d.error());
    } else if (d->header.is_data()) {
      kinds.insert("data/" + std::to_string(d->header.type));
      if (d->header.is_replica()) kinds.insert("replica");
      if (d->header.is_fec()) kinds.insert("fec");
    } else if (const auto body = decode_control(*d)) {
      kinds.insert("control/" + std::to_string(d->header.type));
    } else {
      reasons.insert(body.error());
    }
    // The stream seeds: packets back to back, as the fuzz target's stream mode reads them.
    auto window = ReplayWindow::create(64);
    std::span<const std::byte> rest = as_bytes(f.bytes);
    while (rest.size() >= kHeaderSize) {
      const std::size_t len =
          std::min(rest.size(), kHeaderSize + ((std::to_integer<std::size_t>(rest[10]) << 8) |
                                               std::to_integer<std::size_t>(rest[11])));
      const auto p = decode(rest.first(len));
      rest = rest.subspan(len);
      if (!p || !p->header.is_data()) continue;
      const ReplayVerdict v = window->check_and_update(p->header.sequence);
      replay_duplicate |= v == ReplayVerdict::kDuplicate;
      replay_too_old |= v == ReplayVerdict::kTooOld;
    }
  }
  for (std::size_t i = 0; i <= static_cast<std::size_t>(DropReason::kBadControl); ++i) {
    EXPECT_TRUE(reasons.contains(static_cast<DropReason>(i)))
        << "no seed triggers " << to_string(static_cast<DropReason>(i));
  }
  for (const char* kind :
       {"data/1", "data/4", "data/6", "replica", "fec", "control/1", "control/2", "control/3"}) {
    EXPECT_TRUE(kinds.contains(kind)) << "no valid seed of kind " << kind;
  }
  EXPECT_TRUE(replay_duplicate) << "no stream seed with a duplicate sequence number";
  EXPECT_TRUE(replay_too_old) << "no stream seed with a too-old sequence number";
}

}  // namespace
}  // namespace detwan::dataplane::wire
