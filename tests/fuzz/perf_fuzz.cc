// libFuzzer target for what detwan-perf reads from the network: its test packets
// (tools/perf/perf_wire.h), STAMP sender and reflector packets with their TLVs
// (tools/perf/stamp_wire.h; the reflector rewrites TLVs in place) and the control connection's
// hello message (JSON, spec_from_json + validate_spec on the server).
//
// The first input byte selects the decoder (0: perf packet, 1: STAMP, 2: control JSON; the
// others run all three), the rest is the packet or message. Invariants: a decoded packet
// re-encodes to one that decodes to the same fields; TLV walks stay inside the packet and end;
// reflect_tlvs writes nothing beyond the packet and leaves the base untouched; a spec the
// server accepts gives a bounded packet budget and survives a JSON round trip.
//
// Built with libFuzzer by the fuzz build (tests/fuzz/meson.build, -Dfuzz=true) and with g++ as
// the corpus replay test fuzz_perf_corpus_test.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "tests/fuzz/fuzz_check.h"
#include "tools/perf/control.h"
#include "tools/perf/perf_wire.h"
#include "tools/perf/spec_json.h"
#include "tools/perf/stamp_wire.h"


namespace detwan::perf {
namespace {

void check_perf_packet(const uint8_t* data, size_t size) {
  Packet p;
  if (decode(data, size, &p) != DecodeResult::kOk) return;
  FUZZ_CHECK(size >= kHeaderBytes);
  std::vector<uint8_t> out(size);
  FUZZ_CHECK(encode(p, out.data(), out.size(), size) == size);
  Packet q;
  FUZZ_CHECK(decode(out.data(), out.size(), &q) == DecodeResult::kOk);
  FUZZ_CHECK(q.kind == p.kind && q.session == p.session && q.seq == p.seq &&
                  q.t_a == p.t_a && q.t_b == p.t_b && q.t_c == p.t_c);
}

void check_stamp(const uint8_t* data, size_t size) {
  stamp::SenderPacket s;
  if (stamp::decode_sender(data, size, &s) == stamp::DecodeStatus::kOk && size >= stamp::kBaseBytes) {
    std::vector<uint8_t> out(size);
    FUZZ_CHECK(stamp::encode_sender(s, out.data(), out.size(), size) == size);
    stamp::SenderPacket t;
    FUZZ_CHECK(stamp::decode_sender(out.data(), out.size(), &t) == stamp::DecodeStatus::kOk);
    FUZZ_CHECK(t.seq == s.seq && t.timestamp == s.timestamp &&
                    t.error_estimate == s.error_estimate && t.ssid == s.ssid);
  }
  stamp::ReflectorPacket r;
  if (stamp::decode_reflector(data, size, &r) == stamp::DecodeStatus::kOk &&
      size >= stamp::kBaseBytes) {
    std::vector<uint8_t> out(stamp::kBaseBytes);
    FUZZ_CHECK(stamp::encode_reflector_base(r, out.data(), out.size()) == stamp::kBaseBytes);
    stamp::ReflectorPacket t;
    FUZZ_CHECK(stamp::decode_reflector(out.data(), out.size(), &t) ==
                    stamp::DecodeStatus::kOk);
    FUZZ_CHECK(t.seq == r.seq && t.receive_timestamp == r.receive_timestamp &&
                    t.sender_seq == r.sender_seq && t.sender_timestamp == r.sender_timestamp &&
                    t.sender_ttl == r.sender_ttl);
  }
  if (size < stamp::kBaseBytes) return;

  // TLV walk: every TLV lies inside the packet and the walk ends.
  size_t offset = stamp::kBaseBytes;
  for (int n = 0; n < 70000; ++n) {
    stamp::TlvView tlv;
    const stamp::TlvStatus st = stamp::read_tlv(data, size, offset, &tlv);
    if (st != stamp::TlvStatus::kOk) break;
    FUZZ_CHECK(tlv.value_offset > offset && tlv.value_offset + tlv.length <= size);
    offset = tlv.value_offset + tlv.length;
  }
  stamp::CosValue cos;
  (void)stamp::find_cos_tlv(data, size, &cos);

  // The reflector rewrites TLVs of its reply in place: within the packet, base untouched. The
  // guard bytes after the packet catch a write past its end even without ASan.
  constexpr size_t kGuard = 16;
  std::vector<uint8_t> reply(data, data + size);
  reply.resize(size + kGuard, 0xA5);
  const stamp::TlvReflectResult result =
      stamp::reflect_tlvs(reply.data(), size, size & 0xFF, (size & 1) != 0);
  FUZZ_CHECK(result.requested_dscp >= -1 && result.requested_dscp < 64);
  FUZZ_CHECK(std::memcmp(reply.data(), data, stamp::kBaseBytes) == 0);
  for (size_t i = size; i < size + kGuard; ++i) FUZZ_CHECK(reply[i] == 0xA5);
}

void check_control(std::string_view text) {
  boost::json::error_code ec;
  const boost::json::value v = boost::json::parse(text, ec);
  if (ec) return;
  // The server's hello: {"type": "hello", "version": N, "spec": {...}}; also a bare spec.
  const boost::json::value* spec_json = &v;
  if (const auto* o = v.if_object()) {
    (void)get_string(*o, "type");
    (void)get_int(*o, "version");
    if (const auto* s = o->if_contains("spec")) spec_json = s;
  }
  auto spec = spec_from_json(*spec_json);
  if (!spec) {
    FUZZ_CHECK(!spec.error().message.empty());
    return;
  }
  if (!validate_spec(*spec)) return;
  FUZZ_CHECK(max_packets_for(*spec) > 0);
  // What the client would send for this spec is accepted again and means the same.
  auto again = spec_from_json(boost::json::value(spec_to_json(*spec)));
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(boost::json::serialize(spec_to_json(*again)) ==
                  boost::json::serialize(spec_to_json(*spec)));
}

}  // namespace
}  // namespace detwan::perf

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const uint8_t* body = data + 1;
  const size_t body_size = size - 1;
  if (selector == 0 || selector > 2) detwan::perf::check_perf_packet(body, body_size);
  if (selector == 1 || selector > 2) detwan::perf::check_stamp(body, body_size);
  if (selector >= 2) {
    detwan::perf::check_control(std::string_view(reinterpret_cast<const char*>(body), body_size));
  }
  return 0;
}
