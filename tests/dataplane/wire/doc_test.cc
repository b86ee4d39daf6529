// docs/wire-format.md is the source of truth: read its tables and check the code agrees
// (field offsets and sizes, flag masks, type values, control body layouts, drop reason names and
// their order).
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/wire/control.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::wire {
namespace {

using Row = std::vector<std::string>;

std::string read_doc() {
  std::ifstream in(DETWAN_WIRE_DOC);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string unquote(const std::string& cell) {
  std::string s = trim(cell);
  if (s.size() >= 2 && s.front() == '`' && s.back() == '`') s = s.substr(1, s.size() - 2);
  return s;
}

// The body rows of the first table after the first line that starts with `anchor` (tables
// inside ``` code blocks, i.e. byte diagrams, do not count).
std::vector<Row> table_after(const std::string& doc, const std::string& anchor) {
  std::istringstream in(doc);
  std::string line;
  bool found = false;
  bool in_table = false;
  bool in_code = false;
  int row_index = 0;
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    if (!found) {
      found = line.rfind(anchor, 0) == 0;
      continue;
    }
    if (line.rfind("```", 0) == 0) in_code = !in_code;
    if (in_code || line.rfind('|', 0) != 0) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    if (row_index++ < 2) continue;  // header and separator
    std::string cleaned;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
        cleaned += '/';  // an escaped pipe inside a cell
        ++i;
      } else {
        cleaned += line[i];
      }
    }
    Row row;
    std::stringstream cells(cleaned.substr(1));
    std::string cell;
    while (std::getline(cells, cell, '|')) row.push_back(trim(cell));
    rows.push_back(row);
  }
  return rows;
}

class WireDoc : public ::testing::Test {
 protected:
  void SetUp() override {
    doc_ = read_doc();
    ASSERT_FALSE(doc_.empty()) << "cannot read " << DETWAN_WIRE_DOC;
  }
  std::string doc_;
};

TEST_F(WireDoc, HeaderFieldTableMatchesTheCode) {
  const std::map<std::string, std::pair<std::size_t, std::size_t>> code = {
      {"magic", {kMagicOffset, 2}},
      {"version", {kVersionOffset, 1}},
      {"flags", {kFlagsOffset, 1}},
      {"tunnel_id", {kTunnelIdOffset, 4}},
      {"path_id", {kPathIdOffset, 1}},
      {"type", {kTypeOffset, 1}},
      {"payload_length", {kPayloadLengthOffset, 2}},
      {"session", {kSessionOffset, 4}},
      {"sequence", {kSequenceOffset, 8}},
      {"cycle_id", {kCycleIdOffset, 8}},
      {"tx_time_ns", {kTxTimeOffset, 8}},
  };
  const auto rows = table_after(doc_, "### Fields");
  ASSERT_EQ(rows.size(), code.size());
  std::size_t next_offset = 0;
  std::set<std::string> names;
  for (const Row& row : rows) {
    ASSERT_GE(row.size(), 5u);
    const std::string& name = row[2];
    names.insert(name);
    ASSERT_TRUE(code.contains(name)) << "doc field not in code: " << name;
    EXPECT_EQ(std::stoul(row[0]), code.at(name).first) << name;
    EXPECT_EQ(std::stoul(row[1]), code.at(name).second) << name;
    EXPECT_EQ(std::stoul(row[0]), next_offset) << name << ": fields must be contiguous";
    next_offset = std::stoul(row[0]) + std::stoul(row[1]);
  }
  EXPECT_EQ(names.size(), code.size());
  EXPECT_EQ(next_offset, kHeaderSize);
}

TEST_F(WireDoc, ConstantsAppearInTheText) {
  EXPECT_NE(doc_.find("exactly `0xDE7A`"), std::string::npos);
  EXPECT_EQ(kMagic, 0xDE7A);
  EXPECT_NE(doc_.find("exactly `1`"), std::string::npos);
  EXPECT_EQ(kVersion, 1);
  EXPECT_NE(doc_.find(std::to_string(kMaxPayloadBytes)), std::string::npos);
  EXPECT_NE(doc_.find("68 bytes over IPv4 and 88 bytes over IPv6"), std::string::npos);
  EXPECT_EQ(encap_overhead_bytes(IpVersion::kV4), 68u);
  EXPECT_EQ(encap_overhead_bytes(IpVersion::kV6), 88u);
}

TEST_F(WireDoc, FlagMasks) {
  const auto rows = table_after(doc_, "### Flags");
  const std::map<std::string, uint8_t> code = {
      {"D (data)", kFlagData},
      {"C (control)", kFlagControl},
      {"R (replica)", kFlagReplica},
      {"F (FEC)", kFlagFec},
      {"B (best effort)", kFlagBestEffort},
      {"A (authenticated)", kFlagAuth},
      {"reserved", kFlagReservedMask},
  };
  ASSERT_EQ(rows.size(), code.size());
  for (const Row& row : rows) {
    ASSERT_GE(row.size(), 3u);
    ASSERT_TRUE(code.contains(row[2])) << row[2];
    EXPECT_EQ(std::stoul(unquote(row[1]), nullptr, 16), code.at(row[2])) << row[2];
  }
  // The masks partition the octet: every bit is named exactly once.
  unsigned all = 0;
  for (const auto& [name, mask] : code) {
    EXPECT_EQ(all & mask, 0u) << name;
    all |= mask;
  }
  EXPECT_EQ(all, 0xFFu);
}

TEST_F(WireDoc, TypeValues) {
  const auto rows = table_after(doc_, "### Type");
  const std::map<std::string, int> code = {
      {"data/datagram", int(DataType::kDatagram)},
      {"data/ipv4", int(DataType::kIpv4)},
      {"data/ipv6", int(DataType::kIpv6)},
      {"control/time_request", int(ControlType::kTimeRequest)},
      {"control/time_response", int(ControlType::kTimeResponse)},
      {"control/keepalive", int(ControlType::kKeepalive)},
  };
  ASSERT_EQ(rows.size(), code.size());
  for (const Row& row : rows) {
    ASSERT_GE(row.size(), 3u);
    const std::string key = row[0] + "/" + row[2];
    ASSERT_TRUE(code.contains(key)) << key;
    EXPECT_EQ(std::stoi(row[1]), code.at(key)) << key;
    if (row[0] == "data") {
      EXPECT_TRUE(is_known(DataType(std::stoi(row[1]))));
    } else {
      EXPECT_TRUE(is_known(ControlType(std::stoi(row[1]))));
    }
  }
}

TEST_F(WireDoc, ControlBodyLayouts) {
  struct Body {
    std::string anchor;
    ControlType type;
    std::vector<std::string> fields;
  };
  const Body bodies[] = {
      {"Time request — type", ControlType::kTimeRequest, {"exchange_id", "t1", "reserved"}},
      {"Time response — type", ControlType::kTimeResponse, {"exchange_id", "t1", "t2", "t3"}},
      {"Keepalive — type", ControlType::kKeepalive, {"counter", "interval_ns", "last_rx_counter", "epoch", "echo_epoch"}},
  };
  // "<name> — type <T>, <N> bytes:" (std::regex avoided: g++ 12 warns inside it under ASan).
  auto parse_title = [](const std::string& line, int& type, std::size_t& size) {
    const auto t = line.find("— type ");
    const auto comma = line.find(", ", t);
    const auto bytes = line.find(" bytes:", comma);
    if (t == std::string::npos || comma == std::string::npos || bytes == std::string::npos) {
      return false;
    }
    const std::size_t type_at = t + std::string("— type ").size();
    type = std::stoi(line.substr(type_at, comma - type_at));
    size = std::stoul(line.substr(comma + 2, bytes - comma - 2));
    return bytes + 7 == line.size();
  };
  for (const Body& body : bodies) {
    SCOPED_TRACE(body.anchor);
    const auto at = doc_.find("\n" + body.anchor);
    ASSERT_NE(at, std::string::npos);
    const std::string line = doc_.substr(at + 1, doc_.find('\n', at + 1) - at - 1);
    int type = -1;
    std::size_t size = 0;
    ASSERT_TRUE(parse_title(line, type, size)) << line;
    EXPECT_EQ(type, int(body.type));
    EXPECT_EQ(size, body_size(body.type));

    const auto rows = table_after(doc_, body.anchor);
    ASSERT_EQ(rows.size(), body.fields.size());
    std::size_t next = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i][2], body.fields[i]);
      EXPECT_EQ(std::stoul(rows[i][0]), next) << rows[i][2];
      next += std::stoul(rows[i][1]);
    }
    EXPECT_EQ(next, body_size(body.type));
  }
}

TEST_F(WireDoc, ReceiverRulesListEveryDropReasonInCheckOrder) {
  const auto rows = table_after(doc_, "## Receiver rules");
  ASSERT_EQ(rows.size(), kDropReasonCount);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(unquote(rows[i][0]), to_string(static_cast<DropReason>(i))) << "row " << i;
  }
}

}  // namespace
}  // namespace detwan::dataplane::wire
