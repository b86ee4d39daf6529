// Writes the seed corpus of the wire fuzz target: valid packets of every kind, one crafted
// packet per decode drop reason, and streams of packets whose sequence numbers exercise the
// replay window. Deterministic: running it again rewrites identical files.
//   usage: wire_corpus_gen DIR
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "dataplane/wire/control.h"
#include "dataplane/wire/header.h"

namespace {

using namespace detwan::dataplane::wire;
using Bytes = std::vector<std::byte>;

TunnelHeader base(uint64_t seq = 1000) {
  TunnelHeader h;
  h.flags = kFlagData;
  h.type = static_cast<uint8_t>(DataType::kIpv4);
  h.tunnel_id = 7;
  h.path_id = 0;
  h.sequence = seq;
  h.cycle_id = 1'700'000'000'000;
  h.tx_time_ns = 1'700'000'000'123'456'789;
  return h;
}

Bytes packet(TunnelHeader h, std::size_t payload = 0) {
  h.payload_length = static_cast<uint16_t>(payload);
  Bytes b(kHeaderSize + payload);
  if (encode(h, b).status != EncodeStatus::kOk) std::abort();
  for (std::size_t i = 0; i < payload; ++i) b[kHeaderSize + i] = std::byte(static_cast<uint8_t>(i));
  return b;
}

Bytes control(const ControlBody& body) {
  Bytes b(kHeaderSize + 64);
  TunnelHeader h = base();
  // A control packet's cycle_id is its sender's epoch (a keepalive's own).
  if (const auto* ka = std::get_if<Keepalive>(&body)) h.cycle_id = ka->epoch;
  const EncodeResult r = encode_control(h, body, b);
  if (r.status != EncodeStatus::kOk) std::abort();
  b.resize(r.size);
  return b;
}

Bytes with(Bytes b, std::size_t offset, uint8_t value) {
  b.at(offset) = std::byte{value};
  return b;
}

Bytes stream(const std::vector<uint64_t>& seqs) {
  Bytes out;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    TunnelHeader h = base(seqs[i]);
    h.flags = kFlagData | kFlagReplica;
    h.path_id = static_cast<uint8_t>(i % 2);
    const Bytes p = packet(h, i % 3);
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, Bytes>> seeds;
  auto add = [&](const std::string& name, Bytes b) { seeds.emplace_back(name, std::move(b)); };

  TunnelHeader h = base();
  add("seed-data-ipv4", packet(h, 60));
  h.type = static_cast<uint8_t>(DataType::kIpv6);
  add("seed-data-ipv6", packet(h, 80));
  h.type = static_cast<uint8_t>(DataType::kDatagram);
  add("seed-data-datagram-empty", packet(h, 0));
  h.flags = kFlagData | kFlagReplica;
  h.path_id = 1;
  add("seed-data-replica", packet(h, 16));
  h.flags = kFlagData | kFlagFec;
  add("seed-data-fec", packet(h, 32));
  // Authenticated packets (flag A, a session; the payload ends with a 16-byte tag): the header
  // layer decodes them like any other.
  h.flags = kFlagData | kFlagAuth;
  h.session = 0x5EED0001;
  add("seed-data-authenticated", packet(h, 64 + 16));
  h.flags = kFlagData | kFlagReplica | kFlagAuth;
  add("seed-data-authenticated-replica", packet(h, 16));
  TunnelHeader top = base(~uint64_t{0});
  top.tunnel_id = 0xFFFFFFFF;
  top.path_id = 255;
  top.cycle_id = ~uint64_t{0};
  top.tx_time_ns = INT64_MAX;
  add("seed-data-max-fields", packet(top, 3));
  add("seed-control-time-request", control(TimeRequest{0x1234, 1'700'000'000'000'000'000}));
  add("seed-control-time-response",
      control(TimeResponse{0x1234, 1'700'000'000'000'000'000, 1'700'000'000'005'000'000,
                           1'700'000'000'005'020'000}));
  add("seed-control-keepalive", control(Keepalive{17, 100'000'000, 16}));

  const Bytes good = packet(base(), 16);
  add("seed-bad-too-short", Bytes(good.begin(), good.begin() + 23));
  add("seed-bad-magic", with(good, 1, 0x7B));
  add("seed-bad-version", with(good, kVersionOffset, 2));
  add("seed-bad-reserved-flag", with(good, kFlagsOffset, kFlagData | 0x01));
  add("seed-session-without-flag-a", with(good, kSessionOffset + 3, 0x01));
  add("seed-bad-flag-a-without-session", with(good, kFlagsOffset, kFlagData | kFlagAuth));
  add("seed-bad-flags-d-and-c", with(good, kFlagsOffset, kFlagData | kFlagControl));
  add("seed-bad-flags-control-replica", with(good, kFlagsOffset, kFlagControl | kFlagReplica));
  add("seed-bad-type", with(good, kTypeOffset, 5));
  add("seed-bad-tunnel-id", with(with(with(with(good, 4, 0), 5, 0), 6, 0), 7, 0));
  add("seed-bad-timestamp", with(good, kTxTimeOffset, 0x80));
  add("seed-bad-oversize",
      with(with(good, kPayloadLengthOffset, 0xFF), kPayloadLengthOffset + 1, 0xFF));
  Bytes trailing = good;
  trailing.push_back(std::byte{0});
  add("seed-bad-length-trailing", trailing);
  add("seed-bad-length-truncated", Bytes(good.begin(), good.end() - 1));
  Bytes short_body = control(Keepalive{1, 1'000'000, 0});
  short_body.pop_back();
  short_body[kPayloadLengthOffset + 1] = std::byte{static_cast<uint8_t>(kKeepaliveBodySize - 1)};
  add("seed-bad-control-length", short_body);
  add("seed-bad-control-reserved", with(control(TimeRequest{1, 2}), kHeaderSize + 20, 1));
  Bytes t3_before_t2 = control(TimeResponse{1, 100, 200, 300});
  t3_before_t2[kHeaderSize + 30] = std::byte{0};  // t3: 300 -> 100, below t2 = 200
  t3_before_t2[kHeaderSize + 31] = std::byte{100};
  add("seed-bad-control-t3-before-t2", t3_before_t2);
  add("seed-bad-control-interval",
      with(control(Keepalive{1, 1'000'000, 0}), kHeaderSize + 8, 0x80));

  add("seed-stream-in-order", stream({1, 2, 3, 4, 5, 6, 7, 8}));
  add("seed-stream-reordered", stream({10, 12, 11, 15, 13, 14, 20, 16, 19, 17, 18}));
  add("seed-stream-preof-duplicates", stream({1, 1, 2, 3, 2, 3, 4, 4, 5, 6, 5, 6}));
  add("seed-stream-too-old-and-jump", stream({500, 501, 100, 502, 5000, 4990, 4900, 502, 5001}));
  add("seed-stream-top-of-space",
      stream({~uint64_t{0} - 3, ~uint64_t{0}, ~uint64_t{0} - 1, 0, ~uint64_t{0}, 5}));

  for (const auto& [name, bytes] : seeds) {
    std::string path = dir;
    path += '/';
    path += name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
      return 1;
    }
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
  return 0;
}
