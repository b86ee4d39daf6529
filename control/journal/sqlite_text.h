#pragma once
// Text in and out of SQLite statements, for the journal's files (journal.cc, journal_archive.cc).
#include <string>

#include <sqlite3.h>

namespace detwan::control::journal::detail {

inline std::string column_text(sqlite3_stmt* statement, int column) {
  const unsigned char* text = sqlite3_column_text(statement, column);
  return text == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(text));
}

inline void bind_text(sqlite3_stmt* statement, int index, const std::string& text) {
  sqlite3_bind_text(statement, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

}  // namespace detwan::control::journal::detail
