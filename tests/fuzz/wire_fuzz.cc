// libFuzzer target for the tunnel wire format: decode() and decode_control() on arbitrary bytes,
// with round-trip invariants, and the replay window fed with the decoded sequence numbers and
// compared with a naive model.
//
// The input is used twice:
//  1. as one UDP payload (the seed corpus files are single packets);
//  2. as a stream of packets laid end to end, each 40 + its Payload Length bytes (the last one
//     may be cut short), whose sequence numbers go through a ReplayWindow of 64..512 bits.
// A violated invariant aborts with a message (a crash for libFuzzer, a failed test for the g++
// corpus replay in tests/dataplane/wire/meson.build).
//
// Built with clang (tests/fuzz/run-fuzz) and with g++ (the corpus replay): standard C++ only.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <span>
#include <variant>

#include "tests/fuzz/fuzz_check.h"
#include "dataplane/wire/control.h"
#include "dataplane/wire/header.h"
#include "dataplane/wire/replay_window.h"


namespace detwan::dataplane::wire {
namespace {

using Bytes = std::span<const std::byte>;

bool same_bytes(Bytes a, Bytes b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

bool is_header_reason(DropReason r) {
  return static_cast<std::size_t>(r) <= static_cast<std::size_t>(DropReason::kLengthMismatch);
}

void check_control(const PacketView& packet, Bytes datagram) {
  const auto body = decode_control(packet);
  if (!body) {
    const DropReason r = body.error();
    FUZZ_CHECK(r == DropReason::kBadFlags || r == DropReason::kControlLength ||
                    r == DropReason::kReservedSet || r == DropReason::kBadTimestamp ||
                    r == DropReason::kBadControl);
    FUZZ_CHECK((r == DropReason::kBadFlags) == packet.header.is_data());
    return;
  }
  FUZZ_CHECK(packet.header.is_control());
  FUZZ_CHECK(type_of(*body) == packet.header.control_type());
  FUZZ_CHECK(!validate(*body).has_value());
  // Canonical encoding: re-encoding the parsed packet gives back the very same bytes.
  std::byte out[kHeaderSize + 64];
  const EncodeResult r = encode_control(packet.header, *body, out);
  FUZZ_CHECK(r.status == EncodeStatus::kOk);
  FUZZ_CHECK(same_bytes(Bytes(out, r.size), datagram));

  if (const auto* resp = std::get_if<TimeResponse>(&*body)) {
    // Any t4 must be safe; an accepted sample has a sane round trip.
    for (int64_t t4 : {resp->t1_ns, resp->t3_ns, static_cast<int64_t>(packet.header.sequence >> 1),
                       int64_t{-1}}) {
      if (const auto s = clock_sample(*resp, t4)) FUZZ_CHECK(s->rtt_ns >= 0);
    }
  }
}

std::optional<PacketView> check_packet(Bytes datagram, std::size_t max_payload) {
  const auto d = decode(datagram, max_payload);
  if (!d) {
    FUZZ_CHECK(is_header_reason(d.error()));
    FUZZ_CHECK((d.error() == DropReason::kTooShort) == (datagram.size() < kHeaderSize));
    return std::nullopt;
  }
  const PacketView& p = *d;
  FUZZ_CHECK(datagram.size() >= kHeaderSize);
  FUZZ_CHECK(p.payload.data() == datagram.data() + kHeaderSize);
  FUZZ_CHECK(p.payload.size() == p.header.payload_length);
  FUZZ_CHECK(p.payload.size() == datagram.size() - kHeaderSize);
  FUZZ_CHECK(p.payload.size() <= max_payload && p.payload.size() <= kMaxPayloadBytes);
  FUZZ_CHECK(!validate(p.header, max_payload).has_value());
  FUZZ_CHECK(p.header.is_data() != p.header.is_control());
  std::byte out[kHeaderSize];
  const EncodeResult r = encode(p.header, out);
  FUZZ_CHECK(r.status == EncodeStatus::kOk && r.size == kHeaderSize);
  FUZZ_CHECK(same_bytes(Bytes(out, kHeaderSize), datagram.first(kHeaderSize)));
  if (p.header.is_control()) check_control(p, datagram);
  return p;
}

// The replay window's specification, written the obvious way.
class ReplayModel {
 public:
  explicit ReplayModel(uint64_t bits) : bits_(bits) {}
  ReplayVerdict step(uint64_t s) {
    if (empty_ || s > top_) {
      empty_ = false;
      top_ = s;
      seen_.insert(s);
      return ReplayVerdict::kNew;
    }
    if (top_ - s >= bits_) return ReplayVerdict::kTooOld;
    return seen_.insert(s).second ? ReplayVerdict::kLate : ReplayVerdict::kDuplicate;
  }

 private:
  uint64_t bits_;
  bool empty_ = true;
  uint64_t top_ = 0;
  std::set<uint64_t> seen_;
};

void run_stream(Bytes input, uint64_t window_bits) {
  auto window = ReplayWindow::create(window_bits);
  FUZZ_CHECK(window.has_value());
  ReplayModel model(window_bits);
  while (!input.empty()) {
    std::size_t len = input.size();
    if (len >= kHeaderSize) {
      const std::size_t declared =
          kHeaderSize + ((std::to_integer<std::size_t>(input[kPayloadLengthOffset]) << 8) |
                         std::to_integer<std::size_t>(input[kPayloadLengthOffset + 1]));
      len = declared < len ? declared : len;
    }
    const Bytes record = input.first(len);
    input = input.subspan(len);
    const auto packet = check_packet(record, kMaxPayloadBytes);
    if (!packet || !packet->header.is_data()) continue;
    const uint64_t seq = packet->header.sequence;
    const ReplayVerdict expected = model.step(seq);
    FUZZ_CHECK(window->check(seq) == expected);
    FUZZ_CHECK(window->check_and_update(seq) == expected);
    FUZZ_CHECK(
        window->check(seq) ==
        (expected == ReplayVerdict::kTooOld ? ReplayVerdict::kTooOld : ReplayVerdict::kDuplicate));
  }
}

}  // namespace
}  // namespace detwan::dataplane::wire

// NOLINTNEXTLINE(readability-identifier-naming): the name libFuzzer calls
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace detwan::dataplane::wire;
  const Bytes input(reinterpret_cast<const std::byte*>(data), size);

  // 1. One datagram, with the default limit and with a small limit taken from the input.
  const auto full = check_packet(input, kMaxPayloadBytes);
  const std::size_t small_limit = size == 0 ? 0 : std::size_t{data[0]} * 4;
  const auto limited = check_packet(input, small_limit);
  if (limited) FUZZ_CHECK(full && limited->header == full->header);
  if (full && !limited) FUZZ_CHECK(full->payload.size() > small_limit);

  // 2. A stream of packets through a replay window of 64..512 bits.
  const uint64_t bits = uint64_t{64} << (size == 0 ? 0 : (data[size - 1] & 3));
  run_stream(input, bits);
  return 0;
}
