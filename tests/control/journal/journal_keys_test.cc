// control/journal and tunnel keys (issue 31, item 8): the events keep no key secret, a journal
// written before that is scrubbed on open (no byte of an old key left in its files), the file is
// private from its creation whatever the umask, and a journal of another uid is refused.
#include "control/journal/journal.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

namespace detwan::control::journal {
namespace {

// Two 32-byte keys in hex, as the agent stores them.
const std::string kOldKey(64, 'a');
const std::string kNewKey = std::string(32, '1') + std::string(32, '2');

std::string body_with_keys(const std::string& id, const std::vector<std::string>& secrets) {
  std::string keys;
  uint32_t key_id = 1;
  for (const std::string& secret : secrets) {
    if (!keys.empty()) keys += ",";
    keys += R"({"id":)" + std::to_string(key_id) + R"(,"fingerprint":"f)" +
            std::to_string(key_id + 1) + R"(","secret":")" + secret + R"("})";
    ++key_id;
  }
  return R"({"id":")" + id + R"(","state":"provisioned","tunnel_keys":{"keys":[)" + keys +
         R"(],"tx_key":1,"rotation":"none","rotations":0,"step_unix_ns":0}})";
}

// Every byte of the journal's files (database, WAL, shared memory).
std::string all_bytes(const std::string& path) {
  std::string bytes;
  for (const std::string& file : {path, path + "-wal", path + "-shm"}) {
    std::ifstream in(file, std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return bytes;
}

class JournalKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/detwan-journal-keys-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/agent.db";
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  Event event(const std::string& to, const std::vector<std::string>& secrets, int64_t at) {
    Event e;
    e.at_ns = at;
    e.id = "r-1";
    e.from = "held";
    e.to = to;
    e.reason = "key rotation";
    e.body = body_with_keys("r-1", secrets);
    return e;
  }
  std::string dir_;
  std::string path_;
};

TEST_F(JournalKeysTest, EventsKeepFingerprintsNotSecrets) {
  auto journal = Journal::open(path_, false, "lab");
  ASSERT_TRUE(journal) << journal.error().message;
  ASSERT_TRUE((*journal)->record(event("provisioned", {kOldKey, kNewKey}, 1), 2, nullptr));
  std::vector<std::string> events;
  ASSERT_TRUE((*journal)->for_each_event([&](const Event& e) { events.push_back(e.body); }));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].find("secret"), std::string::npos) << events[0];
  EXPECT_NE(events[0].find(R"("fingerprint":"f2")"), std::string::npos) << events[0];
  EXPECT_NE(events[0].find(R"("rotation":"none")"), std::string::npos) << events[0];
  // The reservation's row keeps both (the current and the previous key).
  const auto loaded = (*journal)->load();
  ASSERT_TRUE(loaded);
  ASSERT_EQ(loaded->reservations.size(), 1u);
  EXPECT_NE(loaded->reservations[0].find(kOldKey), std::string::npos);
  EXPECT_NE(loaded->reservations[0].find(kNewKey), std::string::npos);
}

// Rotating twice (keys A -> {A,B} -> {B} -> {B,C} -> {C}) and erasing after each completed
// rotation leaves no byte of A, nor of B, in any of the journal's files.
TEST_F(JournalKeysTest, ACompletedRotationLeavesNoByteOfTheOldKey) {
  const std::string key_a(64, 'a'), key_b(64, 'b'), key_c(64, 'c');
  auto journal = Journal::open(path_, false, "lab");
  ASSERT_TRUE(journal) << journal.error().message;
  Journal& j = **journal;
  int64_t at = 0;
  const auto step = [&](const std::vector<std::string>& keys) {
    ASSERT_TRUE(j.record(event("provisioned", keys, ++at), 2, nullptr));
  };
  step({key_a});
  step({key_a, key_b});  // adding
  step({key_a, key_b});  // switching
  step({key_b});         // dropping -> done
  ASSERT_TRUE(j.erase_freed());
  EXPECT_EQ(all_bytes(path_).find(key_a), std::string::npos);
  step({key_b, key_c});
  step({key_b, key_c});
  step({key_c});
  ASSERT_TRUE(j.erase_freed());
  const std::string bytes = all_bytes(path_);
  EXPECT_EQ(bytes.find(key_a), std::string::npos);
  EXPECT_EQ(bytes.find(key_b), std::string::npos);
  EXPECT_NE(bytes.find(key_c), std::string::npos);  // the scan does see the current key
  EXPECT_EQ(std::filesystem::file_size(path_ + "-wal"), 0u);
}

// A journal from before: its events carry secrets. Opening it removes them and rebuilds the
// file so not a byte of them is left (free pages included).
TEST_F(JournalKeysTest, AnOldJournalIsScrubbedOnOpen) {
  {
    auto journal = Journal::open(path_, false, "lab");
    ASSERT_TRUE(journal) << journal.error().message;
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  const std::string insert =
      "INSERT INTO events (at_unix_ns, id, from_state, to_state, reason, body) VALUES (1, 'r-1', "
      "'', 'held', 'reserved', '" +
      body_with_keys("r-1", {kOldKey}) + "');";
  ASSERT_EQ(sqlite3_exec(db, insert.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  // A journal of before the scrub carries no mark of it (a new one is marked when created).
  ASSERT_EQ(sqlite3_exec(db, "DELETE FROM meta WHERE key = 'events_scrubbed'", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_close(db), SQLITE_OK);
  ASSERT_NE(all_bytes(path_).find(kOldKey), std::string::npos);  // it is there to be found

  auto journal = Journal::open(path_, false, "lab");
  ASSERT_TRUE(journal) << journal.error().message;
  EXPECT_EQ(all_bytes(path_).find(kOldKey), std::string::npos);
  std::vector<std::string> events;
  ASSERT_TRUE((*journal)->for_each_event([&](const Event& e) { events.push_back(e.body); }));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].find("secret"), std::string::npos);
  EXPECT_NE(events[0].find("fingerprint"), std::string::npos);
  // Marked: the next open does not read every event again.
  sqlite3* check = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &check), SQLITE_OK);
  int marked = 0;
  ASSERT_EQ(sqlite3_exec(
                check, "SELECT 1 FROM meta WHERE key = 'events_scrubbed'",
                [](void* out, int, char**, char**) { return *static_cast<int*>(out) = 1, 0; },
                &marked, nullptr),
            SQLITE_OK);
  sqlite3_close(check);
  EXPECT_EQ(marked, 1);
}

TEST_F(JournalKeysTest, TheFileIsPrivateFromItsCreationAndAnotherUidsIsRefused) {
  const mode_t saved = ::umask(0);
  {
    auto journal = Journal::open(path_, false, "lab");
    ASSERT_TRUE(journal) << journal.error().message;
  }
  ::umask(saved);
  struct stat info {};
  ASSERT_EQ(::stat(path_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  // Made wider by someone: made private again on the descriptor.
  ASSERT_EQ(::chmod(path_.c_str(), 0644), 0);
  ASSERT_TRUE(Journal::open(path_, false, "lab"));
  ASSERT_EQ(::stat(path_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  if (::geteuid() != 0) GTEST_SKIP() << "chown to another uid needs root (CI runs as root)";
  ASSERT_EQ(::chown(path_.c_str(), 65534, 65534), 0);
  const auto refused = Journal::open(path_, false, "lab");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("belongs to uid 65534"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find(path_), std::string::npos);
}

}  // namespace
}  // namespace detwan::control::journal
