// Wire format: round trips, CRC, and rejection of every truncation.
#include "transport/proto/wire.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/transport/proto/virtual_net.h"
#include "transport/proto/connection.h"

namespace detwan::transport::proto::wire {
namespace {

using common::Status;

Header make_header(Type t) {
  Header h;
  h.type = t;
  h.path_id = 3;
  h.flags = 0;
  h.connection_id = 0x0102030405060708ULL;
  h.tx_time_ns = 123'456'789'012;
  return h;
}

// Full parse as a receiver does: header, body structure, CRC.
Status parse(std::span<const std::byte> d) {
  Header h;
  if (decode_header(d, h) != Status::kOk) return Status::kMalformed;
  const auto body = d.subspan(header_bytes(h));
  Status s = Status::kOk;
  HelloBody hb;
  DataBody db;
  AckBody ab;
  FecBody fb;
  CloseBody cb;
  switch (h.type) {
    case Type::kHello:
    case Type::kHelloAck: s = decode_hello(body, hb); break;
    case Type::kData:
      s = decode_data(body, db, (h.flags & kFlagAck) != 0 ? &ab : nullptr);
      break;
    case Type::kAck: s = decode_ack(body, ab); break;
    case Type::kFec: s = decode_fec(body, fb); break;
    case Type::kKeepalive: s = body.empty() ? Status::kOk : Status::kMalformed; break;
    case Type::kClose: s = decode_close(body, cb); break;
  }
  if (s != Status::kOk) return s;
  return crc_ok(d) ? Status::kOk : Status::kDropped;
}

std::vector<std::vector<std::byte>> all_datagrams() {
  std::vector<std::vector<std::byte>> out;
  std::vector<std::byte> buf(1472);
  const auto payload = testing::random_bytes(1000, 7);
  auto push = [&](size_t n) {
    EXPECT_GT(n, 0u);
    out.emplace_back(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(n));
  };
  push(encode_hello(make_header(Type::kHello), HelloBody{4 << 20, kVersion, 1448}, buf));
  push(encode_hello(make_header(Type::kHelloAck), HelloBody{1 << 20, kVersion, 1400}, buf));
  DataBody d;
  d.seq = 0x1'2345'6789;  // the wire keeps the low 32 bits
  d.index = 3;
  d.last_index = 0x0FFF'FFFF;
  d.payload = payload;
  push(encode_data(make_header(Type::kData), d, buf));
  AckBody a;
  a.cumulative = 100;
  a.echo_tx_time_us = 0xFEDC'BA98;
  a.ack_delay_ns = 1000;
  a.window_bytes = 1 << 22;
  a.range_count = 3;
  a.ranges[0] = {150, 160};
  a.ranges[1] = {120, 130};
  a.ranges[2] = {101, 110};
  push(encode_ack(make_header(Type::kAck), a, buf));
  FecBody f;
  f.first_seq = 64;
  f.k = 8;
  f.m = 2;
  f.index = 1;
  f.symbol = std::span(payload).first(500);
  push(encode_fec(make_header(Type::kFec), f, buf));
  push(encode_empty(make_header(Type::kKeepalive), buf));
  push(encode_close(make_header(Type::kClose), CloseBody{5}, buf));
  d.payload = std::span(payload).first(64);
  push(encode_data(make_header(Type::kData), d, buf, &a));  // a reply carrying its ACK
  return out;
}

TEST(Wire, RoundTripEveryType) {
  const auto payload = testing::random_bytes(1000, 7);
  const auto all = all_datagrams();
  ASSERT_EQ(all.size(), 8u);
  for (const auto& d : all) {
    EXPECT_EQ(parse(d), Status::kOk);
    Header h;
    ASSERT_EQ(decode_header(d, h), Status::kOk);
    // DATA (short form) carries the id's low 32 bits; every type the time in microseconds.
    const bool data = h.type == Type::kData;
    EXPECT_EQ(h.short_form, data);
    EXPECT_EQ(h.connection_id, data ? 0x05060708ULL : 0x0102030405060708ULL);
    EXPECT_EQ(h.tx_time_us, 123'456'789u);
    if (!data) {
      EXPECT_EQ(h.tx_time_ns, 123'456'789'012);
    }
    EXPECT_EQ(h.path_id, 3);
    ASSERT_TRUE(peek_connection_id(d).has_value());
    EXPECT_EQ(peek_connection_id(d)->id, h.connection_id);
    EXPECT_EQ(peek_connection_id(d)->short_form, data);
    EXPECT_EQ(is_hello(d), h.type == Type::kHello);
  }
  // DATA: 24 header bytes, then the payload.
  EXPECT_EQ(all[2].size(), kDataHeaderBytes + payload.size());
  EXPECT_EQ(kDataHeaderBytes, 24u);
  DataBody d;
  ASSERT_EQ(decode_data(std::span(all[2]).subspan(kShortHeaderBytes), d), Status::kOk);
  EXPECT_EQ(d.seq, 0x2345'6789u);
  EXPECT_EQ(d.index, 3u);
  EXPECT_EQ(d.last_index, 0x0FFF'FFFFu);
  ASSERT_EQ(d.payload.size(), payload.size());
  EXPECT_TRUE(std::equal(d.payload.begin(), d.payload.end(), payload.begin()));
  AckBody a;
  ASSERT_EQ(decode_ack(std::span(all[3]).subspan(kHeaderBytes), a), Status::kOk);
  EXPECT_EQ(a.cumulative, 100u);
  EXPECT_EQ(a.echo_tx_time_us, 0xFEDC'BA98u);
  EXPECT_EQ(a.ack_delay_ns, 1000);
  EXPECT_EQ(a.window_bytes, uint64_t{1} << 22);
  ASSERT_EQ(a.range_count, 3);
  EXPECT_EQ(a.ranges[1].start, 120u);
  EXPECT_EQ(a.ranges[1].end, 130u);
  FecBody f;
  ASSERT_EQ(decode_fec(std::span(all[4]).subspan(kHeaderBytes), f), Status::kOk);
  EXPECT_EQ(f.first_seq, 64u);
  EXPECT_EQ(f.k, 8);
  EXPECT_EQ(f.m, 2);
  EXPECT_EQ(f.index, 1);
  EXPECT_EQ(f.symbol.size(), 500u);
  HelloBody hb;
  ASSERT_EQ(decode_hello(std::span(all[0]).subspan(kHeaderBytes), hb), Status::kOk);
  EXPECT_EQ(hb.recv_window_bytes, uint64_t{4} << 20);
  EXPECT_EQ(hb.segment_bytes, 1448);
  CloseBody cb;
  ASSERT_EQ(decode_close(std::span(all[6]).subspan(kHeaderBytes), cb), Status::kOk);
  EXPECT_EQ(cb.reason, 5);
  // DATA with an ACK riding along: header, the ACK body, then the payload.
  Header h;
  ASSERT_EQ(decode_header(all[7], h), Status::kOk);
  EXPECT_EQ(h.flags, kFlagAck);
  EXPECT_EQ(all[7].size(), kDataHeaderBytes + kAckFixedBytes + 3 * 16 + 64);
  AckBody ridden;
  DataBody with_ack;
  ASSERT_EQ(decode_data(std::span(all[7]).subspan(kShortHeaderBytes), with_ack, &ridden),
            Status::kOk);
  EXPECT_EQ(ridden.cumulative, 100u);
  EXPECT_EQ(ridden.range_count, 3);
  EXPECT_EQ(ridden.ranges[2].start, 101u);
  ASSERT_EQ(with_ack.payload.size(), 64u);
  EXPECT_TRUE(std::equal(with_ack.payload.begin(), with_ack.payload.end(), payload.begin()));
}

TEST(Wire, EveryTruncationRejected) {
  for (const auto& d : all_datagrams()) {
    for (size_t len = 0; len < d.size(); ++len) {
      EXPECT_NE(parse(std::span(d).first(len)), Status::kOk) << "type " << int(d[3]) << " len "
                                                             << len;
    }
  }
}

TEST(Wire, EveryBitFlipDetected) {
  for (const auto& d : all_datagrams()) {
    for (size_t i = 0; i < d.size(); ++i) {
      auto copy = d;
      copy[i] ^= std::byte{0x10};
      EXPECT_NE(parse(copy), Status::kOk) << "byte " << i;
    }
  }
}

TEST(Wire, HostileFieldsRejected) {
  std::vector<std::byte> buf(1472);
  AckBody a;
  a.range_count = 1;
  a.ranges[0] = {10, 10};  // empty range
  const size_t n = encode_ack(make_header(Type::kAck), a, buf);
  EXPECT_EQ(decode_ack(std::span(buf).subspan(kHeaderBytes, n - kHeaderBytes), a),
            Status::kMalformed);
  // SACK count larger than the datagram.
  AckBody b;
  const size_t m = encode_ack(make_header(Type::kAck), b, buf);
  buf[kHeaderBytes + 28] = std::byte{5};
  EXPECT_EQ(decode_ack(std::span(buf).subspan(kHeaderBytes, m - kHeaderBytes), b),
            Status::kMalformed);
  // FEC with index >= m and k == 0.
  const auto sym = testing::random_bytes(64, 1);
  FecBody f;
  f.k = 4;
  f.m = 2;
  f.index = 2;
  f.symbol = sym;
  const size_t q = encode_fec(make_header(Type::kFec), f, buf);
  EXPECT_EQ(decode_fec(std::span(buf).subspan(kHeaderBytes, q - kHeaderBytes), f),
            Status::kMalformed);
  // Wrong magic and version.
  auto d = all_datagrams()[0];
  d[0] = std::byte{0};
  EXPECT_FALSE(peek_connection_id(d).has_value());
  d = all_datagrams()[0];
  d[2] = std::byte{9};
  EXPECT_FALSE(is_hello(d));
  // DATA exists only in the short form: a long-form DATA is malformed.
  d = all_datagrams()[0];
  d[3] = static_cast<std::byte>(Type::kData);
  Header h;
  EXPECT_EQ(decode_header(d, h), Status::kMalformed);
  // A segment index beyond its message's last index; a HELLO announcing 0-byte segments.
  std::vector<std::byte> body(11);
  body[4 + 6] = std::byte{1};  // last_index 1, index 0: valid
  DataBody db;
  EXPECT_EQ(decode_data(body, db), Status::kOk);
  body[4 + 3] = std::byte{0x20};  // index 2 > last_index 1
  EXPECT_EQ(decode_data(body, db), Status::kMalformed);
  HelloBody hb{1 << 20, kVersion, 0};
  const size_t hn = encode_hello(make_header(Type::kHello), hb, buf);
  EXPECT_EQ(decode_hello(std::span(buf).subspan(kHeaderBytes, hn - kHeaderBytes), hb),
            Status::kMalformed);
  // The encoder refuses what the short form cannot say.
  DataBody big;
  big.last_index = kMaxSegmentIndex + 1;
  EXPECT_EQ(encode_data(make_header(Type::kData), big, buf), 0u);
  Header far = make_header(Type::kData);
  far.path_id = kMaxShortPaths;
  EXPECT_EQ(encode_data(far, DataBody{}, buf), 0u);
}

TEST(Wire, DataSymbolRoundTripWithPadding) {
  const auto payload = testing::random_bytes(300, 3);
  DataBody d;
  d.index = 5;
  d.last_index = 9;
  d.payload = payload;
  std::vector<std::byte> sym(1000, std::byte{0});
  const size_t n = encode_data_symbol(d, sym);
  EXPECT_EQ(n, kDataSymbolFixedBytes + 300);
  DataBody back;
  ASSERT_EQ(decode_data_symbol(sym, back), Status::kOk);  // padded symbol parses
  EXPECT_EQ(back.index, 5u);
  EXPECT_EQ(back.last_index, 9u);
  EXPECT_EQ(back.payload.size(), 300u);
  EXPECT_TRUE(std::equal(back.payload.begin(), back.payload.end(), payload.begin()));
}

}  // namespace
}  // namespace detwan::transport::proto::wire
