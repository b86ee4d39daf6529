// libFuzzer target for the transport protocol's datagrams (transport/proto/wire.h) and the
// sans-I/O Connection that consumes them (transport/proto/connection.h).
//
// The input is a stream of records, each
//   u8 control | u16 length (big-endian) | `length` bytes of datagram
// control bit 0: recompute the datagram's CRC32C (otherwise the fuzzer would almost never get
//                past the checksum); bit 1: write the connection's id into the header;
//                bit 2: the path (of 2) it arrives on; bits 4-7: milliseconds to advance
//                the virtual clock before it arrives.
// Every datagram goes through the stand-alone decoders (with round-trip checks: a decoded
// body, re-encoded, decodes to the same fields) and then into a server Connection (two paths,
// small memory budgets) whose transmit side is polled after each one. Invariants: decoders and
// the connection never crash, what the connection sends decodes with a valid CRC, messages
// delivered respect max_message_bytes, unread bytes never exceed the receive budget plus one
// message, and every datagram is either accepted or counted in exactly one drop counter.
//
// Built with libFuzzer by the fuzz build (tests/fuzz/meson.build, -Dfuzz=true) and with g++ as
// the corpus replay test fuzz_transport_corpus_test.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "common/byte_order.h"
#include "transport/proto/connection.h"
#include "transport/proto/wire.h"


namespace detwan::transport::proto {
namespace {

using Bytes = std::span<const std::byte>;

bool ok(common::Status s) { return s == common::Status::kOk; }

constexpr uint64_t kConnectionId = 0x0123456789ABCDEFull;
constexpr int64_t kMaxMessageBytes = 64 * 1024;
constexpr int64_t kMaxReassemblyBytes = 128 * 1024;

// Each body decoder on the bytes after the header; a decoded body re-encodes to a datagram that
// decodes to the same fields.
void check_decoders(Bytes datagram) {
  wire::Header h;
  if (!ok(wire::decode_header(datagram, h))) return;
  FUZZ_CHECK(datagram.size() >= wire::header_bytes(h));
  const Bytes body = datagram.subspan(wire::header_bytes(h));
  std::vector<std::byte> out(datagram.size() + 64);
  wire::Header h2;
  switch (h.type) {
    case wire::Type::kHello:
    case wire::Type::kHelloAck: {
      wire::HelloBody b;
      if (!ok(wire::decode_hello(body, b))) return;
      const size_t n = wire::encode_hello(h, b, out);
      FUZZ_CHECK(n > 0);
      wire::HelloBody b2;
      FUZZ_CHECK(ok(wire::decode_header(Bytes(out.data(), n), h2)));
      // A sealed datagram (protocol version kVersionSealed) carries its packet number where the
      // plain one has its CRC32C, and its integrity is the AEAD tag's: no CRC to check.
      FUZZ_CHECK(h.version == wire::kVersionSealed || wire::crc_ok(Bytes(out.data(), n)));
      FUZZ_CHECK(ok(wire::decode_hello(Bytes(out.data(), n).subspan(wire::kHeaderBytes), b2)));
      FUZZ_CHECK(b2.recv_window_bytes == b.recv_window_bytes && b2.version == b.version &&
                 b2.segment_bytes == b.segment_bytes);
      break;
    }
    case wire::Type::kData: {
      wire::DataBody b;
      wire::AckBody ack;
      const bool with_ack = (h.flags & wire::kFlagAck) != 0;
      if (!ok(wire::decode_data(body, b, with_ack ? &ack : nullptr))) return;
      FUZZ_CHECK(b.payload.data() >= body.data() &&
                           b.payload.data() + b.payload.size() <= body.data() + body.size());
      FUZZ_CHECK(h.short_form && b.index <= b.last_index &&
                 b.last_index <= wire::kMaxSegmentIndex && b.seq <= 0xFFFF'FFFFu);
      h.tx_time_ns = int64_t{h.tx_time_us} * 1000;
      const size_t n = wire::encode_data(h, b, out, with_ack ? &ack : nullptr);
      FUZZ_CHECK(n == datagram.size());
      FUZZ_CHECK(ok(wire::decode_header(Bytes(out.data(), n), h2)));
      FUZZ_CHECK(h2.short_form && h2.connection_id == h.connection_id && h2.path_id == h.path_id &&
                 h2.tx_time_us == h.tx_time_us);
      wire::DataBody b2;
      wire::AckBody ack2;
      FUZZ_CHECK(ok(wire::decode_data(Bytes(out.data(), n).subspan(wire::kShortHeaderBytes), b2,
                                      with_ack ? &ack2 : nullptr)));
      FUZZ_CHECK(h2.flags == h.flags);
      FUZZ_CHECK(!with_ack ||
                 (ack2.cumulative == ack.cumulative && ack2.range_count == ack.range_count &&
                  ack2.echo_tx_time_us == ack.echo_tx_time_us));
      FUZZ_CHECK(b2.seq == b.seq && b2.index == b.index && b2.last_index == b.last_index &&
                 b2.payload.size() == b.payload.size());
      FUZZ_CHECK(b.payload.empty() ||
                           std::memcmp(b2.payload.data(), b.payload.data(), b.payload.size()) == 0);
      // The FEC symbol of this segment parses back to the same fields.
      std::vector<std::byte> symbol(wire::kDataSymbolFixedBytes + b.payload.size());
      const size_t s = wire::encode_data_symbol(b, symbol);
      FUZZ_CHECK(s == symbol.size());
      wire::DataBody b3;
      FUZZ_CHECK(ok(wire::decode_data_symbol(symbol, b3)));
      FUZZ_CHECK(b3.index == b.index && b3.last_index == b.last_index &&
                 b3.payload.size() == b.payload.size());
      break;
    }
    case wire::Type::kAck: {
      wire::AckBody b;
      if (!ok(wire::decode_ack(body, b))) return;
      FUZZ_CHECK(b.range_count <= wire::kMaxSackRanges);
      const size_t n = wire::encode_ack(h, b, out);
      FUZZ_CHECK(n > 0);
      wire::AckBody b2;
      FUZZ_CHECK(ok(wire::decode_ack(Bytes(out.data(), n).subspan(wire::kHeaderBytes), b2)));
      FUZZ_CHECK(b2.cumulative == b.cumulative && b2.range_count == b.range_count &&
                           b2.window_bytes == b.window_bytes);
      for (uint8_t i = 0; i < b.range_count; ++i) {
        FUZZ_CHECK(b2.ranges[i].start == b.ranges[i].start &&
                             b2.ranges[i].end == b.ranges[i].end);
      }
      break;
    }
    case wire::Type::kFec: {
      wire::FecBody b;
      if (!ok(wire::decode_fec(body, b))) return;
      const size_t n = wire::encode_fec(h, b, out);
      FUZZ_CHECK(n > 0);
      wire::FecBody b2;
      FUZZ_CHECK(ok(wire::decode_fec(Bytes(out.data(), n).subspan(wire::kHeaderBytes), b2)));
      FUZZ_CHECK(b2.first_seq == b.first_seq && b2.k == b.k && b2.m == b.m &&
                           b2.index == b.index && b2.symbol.size() == b.symbol.size());
      break;
    }
    case wire::Type::kClose: {
      wire::CloseBody b;
      if (!ok(wire::decode_close(body, b))) return;
      const size_t n = wire::encode_close(h, b, out);
      FUZZ_CHECK(n > 0);
      break;
    }
    case wire::Type::kKeepalive:
      break;
  }
}

uint64_t drops(const ChannelStats& s) {
  return s.dropped_corrupt + s.dropped_malformed + s.dropped_duplicate + s.dropped_foreign +
         s.dropped_memory + s.dropped_auth + s.dropped_replay;
}

// Polls everything the connection wants to send now; each datagram must be well formed.
void drain(Connection& c, int64_t now_ns, std::vector<std::byte>& buf) {
  for (int i = 0; i < 64; ++i) {
    const Transmit t = c.poll_transmit(now_ns, buf);
    if (t.size_bytes == 0) break;
    FUZZ_CHECK(t.size_bytes <= c.max_datagram_bytes());
    FUZZ_CHECK(t.path < 2);
    const Bytes d(buf.data(), t.size_bytes);
    wire::Header h;
    FUZZ_CHECK(ok(wire::decode_header(d, h)));
    FUZZ_CHECK(wire::crc_ok(d));
    FUZZ_CHECK(h.connection_id == (h.short_form ? kConnectionId & 0xFFFF'FFFFu : kConnectionId));
  }
  while (auto e = c.poll_event()) {
    if (e->kind == Event::Kind::kMessage) {
      FUZZ_CHECK(static_cast<int64_t>(e->message.size()) <= kMaxMessageBytes);
      // Every second message is read at once; the others stay unread (the budget holds them).
      if ((e->message.size() & 1) == 0) c.consumed(e->message.size());
    }
  }
  FUZZ_CHECK(static_cast<int64_t>(c.unread_bytes()) <=
                       kMaxReassemblyBytes + kMaxMessageBytes);
}

}  // namespace
}  // namespace detwan::transport::proto

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace detwan::transport::proto;  // NOLINT
  const Bytes input(reinterpret_cast<const std::byte*>(data), size);
  check_decoders(input);

  ConnectionConfig config;
  config.role = Role::kServer;
  config.connection_id = kConnectionId;
  config.options.paths.resize(2);
  config.options.paths[0].rate_bps = 100'000'000;
  config.options.paths[1].rate_bps = 50'000'000;
  config.options.max_message_bytes = kMaxMessageBytes;
  config.options.max_reassembly_bytes = kMaxReassemblyBytes;
  config.options.recv_window_bytes = 256 * 1024;
  config.options.fec.enabled = (size & 1) != 0;
  int64_t now_ns = 1'000'000'000;
  Connection c(config, now_ns);
  std::vector<std::byte> out(c.max_datagram_bytes());
  std::vector<std::byte> datagram;

  size_t pos = 0;
  while (pos + 3 <= size) {
    const uint8_t control = data[pos];
    const size_t len = std::min<size_t>((size_t{data[pos + 1]} << 8) | data[pos + 2], size - pos - 3);
    datagram.assign(input.begin() + static_cast<std::ptrdiff_t>(pos + 3),
                    input.begin() + static_cast<std::ptrdiff_t>(pos + 3 + len));
    pos += 3 + len;
    // Control bits 0x02 / 0x01 make the connection id / the CRC right, in either form.
    auto* raw = reinterpret_cast<uint8_t*>(datagram.data());
    const bool short_form = wire::is_data(datagram);
    if ((control & 0x02) != 0 && short_form) {
      detwan::common::store_be32(raw + 1, static_cast<uint32_t>(kConnectionId));
    } else if ((control & 0x02) != 0 && datagram.size() >= 14) {
      detwan::common::store_be64(raw + 6, kConnectionId);
    }
    const size_t crc_at = short_form ? wire::kShortCrcOffset : wire::kCrcOffset;
    if ((control & 0x01) != 0 && datagram.size() >= crc_at + 4) {
      detwan::common::store_be32(raw + crc_at, 0);
      detwan::common::store_be32(raw + crc_at, wire::crc32c(datagram));
    }
    check_decoders(datagram);
    now_ns += int64_t{(control >> 4) & 0x0F} * 1'000'000;

    const detwan::transport::ChannelStats before = c.stats();
    const bool was_failed = c.failed();
    const auto status = c.on_datagram((control >> 2) & 0x01, datagram, now_ns);
    const detwan::transport::ChannelStats after = c.stats();
    if (!was_failed) {
      FUZZ_CHECK(after.datagrams_received >= before.datagrams_received);
      // A refused datagram is counted as a drop (or found the connection failed/closed).
      if (!ok(status) && !c.failed()) FUZZ_CHECK(drops(after) >= drops(before));
    }
    drain(c, now_ns, out);
    // Timers too: jump to the next wake-up when it is near.
    const int64_t wake = c.next_wakeup_ns();
    if (wake > now_ns && wake - now_ns < 50'000'000) {
      now_ns = wake;
      drain(c, now_ns, out);
    }
  }
  return 0;
}
