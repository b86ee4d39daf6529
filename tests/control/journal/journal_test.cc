// control/journal: the SQLite WAL journal, each test in its own temporary directory.
#include "control/journal/journal.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

namespace detwan::control::journal {
namespace {

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/detwan-journal-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/agent.db";
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::unique_ptr<Journal> open(const std::string& domain = "lab") {
    auto journal = Journal::open(path_, false, domain);
    EXPECT_TRUE(journal.has_value()) << journal.error().message;
    return journal ? std::move(*journal) : nullptr;
  }

  // A statement on a second connection to the same file (as another process would see it).
  std::vector<std::string> query(const std::string& sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    std::vector<std::string> rows;
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    while (sqlite3_step(s) == SQLITE_ROW) {
      std::string row;
      for (int c = 0; c < sqlite3_column_count(s); ++c) {
        const unsigned char* text = sqlite3_column_text(s, c);
        row += (c == 0 ? "" : "|") + std::string(text ? reinterpret_cast<const char*>(text) : "");
      }
      rows.push_back(row);
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return rows;
  }
  void exec(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    char* message = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message), SQLITE_OK)
        << (message ? message : "");
    sqlite3_free(message);
    sqlite3_close(db);
  }

  std::string dir_;
  std::string path_;
};

Event event(const std::string& id, const std::string& from, const std::string& to, int64_t at) {
  Event e;
  e.at_ns = at;
  e.id = id;
  e.from = from;
  e.to = to;
  e.reason = from.empty() ? "reserved" : "by_client";
  e.body = R"({"id":")" + id + R"(","state":")" + to + R"("})";
  return e;
}

TEST_F(JournalTest, OpenCreatesTheSchemaInWalMode) {
  auto journal = open();
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(journal->path(), path_);
  EXPECT_EQ(
      query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"),
      (std::vector<std::string>{"archive", "events", "federation", "meta", "pools", "requests",
                                 "reservations"}));
  EXPECT_EQ(query("SELECT key, value FROM meta ORDER BY key"),
            (std::vector<std::string>{"domain|lab", "events_scrubbed|1", "next_key|1",
                                      "schema_version|1"}));
  EXPECT_EQ(query("PRAGMA journal_mode"), (std::vector<std::string>{"wal"}));
  const auto loaded = journal->load();
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  EXPECT_EQ(loaded->next_key, 1u);
  EXPECT_TRUE(loaded->reservations.empty());
  EXPECT_TRUE(loaded->requests.empty());
  EXPECT_EQ(loaded->events, 0);
  EXPECT_EQ(journal->commits(), 0u);
}

TEST_F(JournalTest, RecordThenLoadReturnsCurrentBodiesRequestsAndNextKey) {
  auto journal = open();
  ASSERT_NE(journal, nullptr);
  const RequestRecord request{"client-1", "fp-1", "r-1"};
  ASSERT_TRUE(journal->record(event("r-1", "", "held", 100), 2, &request).has_value());
  ASSERT_TRUE(journal->record(event("r-2", "", "held", 200), 3, nullptr).has_value());
  ASSERT_TRUE(journal->record(event("r-1", "held", "committed", 300), 3, nullptr).has_value());
  EXPECT_EQ(journal->commits(), 3u);
  const auto loaded = journal->load();
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  EXPECT_EQ(loaded->next_key, 3u);
  EXPECT_EQ(loaded->events, 3);
  std::vector<std::string> bodies = loaded->reservations;
  std::sort(bodies.begin(), bodies.end());
  EXPECT_EQ(bodies, (std::vector<std::string>{R"({"id":"r-1","state":"committed"})",
                                              R"({"id":"r-2","state":"held"})"}));
  ASSERT_EQ(loaded->requests.size(), 1u);
  EXPECT_EQ(loaded->requests[0].client_request_id, "client-1");
  EXPECT_EQ(loaded->requests[0].fingerprint, "fp-1");
  EXPECT_EQ(loaded->requests[0].reservation_id, "r-1");
}

TEST_F(JournalTest, ReopenAfterCloseKeepsEverything) {
  {
    auto journal = open();
    ASSERT_NE(journal, nullptr);
    const RequestRecord request{"client-9", "fp-9", "r-7"};
    ASSERT_TRUE(journal->record(event("r-7", "", "held", 1), 8, &request).has_value());
    ASSERT_TRUE(journal->record(event("r-7", "held", "terminated", 2), 8, nullptr).has_value());
  }
  auto journal = open();
  ASSERT_NE(journal, nullptr);
  const auto loaded = journal->load();
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  EXPECT_EQ(loaded->next_key, 8u);
  EXPECT_EQ(loaded->events, 2);
  EXPECT_EQ(loaded->reservations,
            (std::vector<std::string>{R"({"id":"r-7","state":"terminated"})"}));
  ASSERT_EQ(loaded->requests.size(), 1u);
  EXPECT_EQ(loaded->requests[0].reservation_id, "r-7");
  // Reopening does not reset the meta rows.
  EXPECT_EQ(query("SELECT value FROM meta WHERE key = 'next_key'"),
            (std::vector<std::string>{"8"}));
}

TEST_F(JournalTest, AJournalOfAnotherDomainIsRefused) {
  ASSERT_NE(open("lab"), nullptr);
  const auto other = Journal::open(path_, false, "production");
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code, common::ErrorCode::kConfig);
  const std::string& m = other.error().message;
  EXPECT_NE(m.find(path_), std::string::npos) << m;
  EXPECT_NE(m.find("'lab'"), std::string::npos) << m;
  EXPECT_NE(m.find("'production'"), std::string::npos) << m;
}

TEST_F(JournalTest, DomainIsStoredVerbatim) {
  // Journal::open takes any domain string (topologies built in code are not name-checked).
  const std::string domain = "o'neil's lab";
  {
    auto journal = Journal::open(path_, false, domain);
    ASSERT_TRUE(journal.has_value()) << journal.error().message;
  }
  EXPECT_EQ(query("SELECT value FROM meta WHERE key = 'domain'"), (std::vector<std::string>{domain}));
  EXPECT_TRUE(Journal::open(path_, false, domain).has_value());
  EXPECT_FALSE(Journal::open(path_, false, "o'neil").has_value());
}

TEST_F(JournalTest, AnotherSchemaVersionIsRefused) {
  ASSERT_NE(open(), nullptr);
  exec("UPDATE meta SET value = '2' WHERE key = 'schema_version'");
  const auto again = Journal::open(path_, false, "lab");
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message.find("schema version 2"), std::string::npos)
      << again.error().message;
}

TEST_F(JournalTest, ForEachEventInOrder) {
  auto journal = open();
  ASSERT_NE(journal, nullptr);
  const std::vector<Event> written = {event("r-1", "", "held", 50), event("r-2", "", "held", 10),
                                      event("r-1", "held", "committed", 30),
                                      event("r-2", "held", "terminated", 20)};
  for (const Event& e : written) ASSERT_TRUE(journal->record(e, 3, nullptr).has_value());
  std::vector<Event> seen;
  ASSERT_TRUE(journal->for_each_event([&](const Event& e) { seen.push_back(e); }).has_value());
  ASSERT_EQ(seen.size(), written.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    // Journal order (seq), not at_ns order.
    if (i > 0) {
      EXPECT_GT(seen[i].seq, seen[i - 1].seq);
    }
    EXPECT_EQ(seen[i].at_ns, written[i].at_ns);
    EXPECT_EQ(seen[i].id, written[i].id);
    EXPECT_EQ(seen[i].from, written[i].from);
    EXPECT_EQ(seen[i].to, written[i].to);
    EXPECT_EQ(seen[i].reason, written[i].reason);
    EXPECT_EQ(seen[i].body, written[i].body);
  }
}

TEST_F(JournalTest, AFailingWriteReturnsAnErrorAndLeavesThePreviousContent) {
  auto journal = open();
  ASSERT_NE(journal, nullptr);
  ASSERT_TRUE(journal->record(event("r-1", "", "held", 1), 2, nullptr).has_value());
  // The request row of the next transition fails after its event and body rows were written:
  // all three must be rolled back.
  exec(
      "CREATE TRIGGER fail_requests BEFORE INSERT ON requests "
      "BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
  const RequestRecord request{"client-2", "fp", "r-2"};
  const auto failed = journal->record(event("r-1", "held", "committed", 2), 3, &request);
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().code, common::ErrorCode::kIo);
  EXPECT_NE(failed.error().message.find(path_), std::string::npos) << failed.error().message;
  EXPECT_NE(failed.error().message.find("r-1"), std::string::npos) << failed.error().message;
  EXPECT_NE(failed.error().message.find("injected failure"), std::string::npos)
      << failed.error().message;
  EXPECT_EQ(journal->commits(), 1u);
  auto loaded = journal->load();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->next_key, 2u);
  EXPECT_EQ(loaded->events, 1);
  EXPECT_EQ(loaded->reservations, (std::vector<std::string>{R"({"id":"r-1","state":"held"})"}));
  EXPECT_TRUE(loaded->requests.empty());

  // A failing first statement (the event row) the same way; then the journal works again.
  exec(
      "CREATE TRIGGER fail_events BEFORE INSERT ON events "
      "BEGIN SELECT RAISE(ABORT, 'no events'); END;");
  EXPECT_FALSE(journal->record(event("r-1", "held", "committed", 3), 3, nullptr).has_value());
  exec("DROP TRIGGER fail_requests; DROP TRIGGER fail_events;");
  ASSERT_TRUE(journal->record(event("r-1", "held", "committed", 4), 3, &request).has_value());
  loaded = journal->load();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->next_key, 3u);
  EXPECT_EQ(loaded->events, 2);
  EXPECT_EQ(loaded->requests.size(), 1u);
}

TEST_F(JournalTest, AnUnusablePathIsAnErrorNamingIt) {
  const std::string bad = dir_ + "/no/such/dir/agent.db";
  const auto journal = Journal::open(bad, false, "lab");
  ASSERT_FALSE(journal.has_value());
  EXPECT_NE(journal.error().message.find(bad), std::string::npos) << journal.error().message;
  // A directory is not a database either.
  const auto directory = Journal::open(dir_, false, "lab");
  ASSERT_FALSE(directory.has_value());
  EXPECT_NE(directory.error().message.find(dir_), std::string::npos) << directory.error().message;
}

TEST_F(JournalTest, PoolsAreStoredReplacedAndRemoved) {
  auto j = open();
  ASSERT_NE(j, nullptr);
  const std::string one = R"({"name":"a-cpu","ranks":2})";
  const std::string two = R"({"name":"a-cpu","ranks":4})";
  ASSERT_TRUE(j->put_pool("a-cpu", &one).has_value());
  ASSERT_TRUE(j->put_pool("a-cpu", &two).has_value());  // replaced
  ASSERT_TRUE(j->put_pool("b-cpu", &one).has_value());
  ASSERT_TRUE(j->put_pool("b-cpu", nullptr).has_value());  // removed
  auto loaded = j->load();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->pools, std::vector<std::string>{two});
}

}  // namespace
}  // namespace detwan::control::journal
