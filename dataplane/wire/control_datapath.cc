// Control body encode/decode and the clock-offset sample: no allocation, exceptions or logging.
#include <limits>
#include <type_traits>

#include "dataplane/wire/byte_order.h"
#include "dataplane/wire/control.h"

namespace detwan::dataplane::wire {

namespace {

__extension__ using Int128 = __int128;

// Body field offsets.
constexpr std::size_t kField0 = 0;
constexpr std::size_t kField1 = 8;
constexpr std::size_t kField2 = 16;
constexpr std::size_t kField3 = 24;
constexpr std::size_t kField4 = 32;

// Timestamps travel as uint64; values >= 2^63 become negative int64 and fail validation.
int64_t load_time(const std::byte* p) noexcept { return static_cast<int64_t>(load_be64(p)); }
void store_time(std::byte* p, int64_t t) noexcept { store_be64(p, static_cast<uint64_t>(t)); }

void write_body(const ControlBody& body, std::byte* p) noexcept {
  if (const auto* req = std::get_if<TimeRequest>(&body)) {
    store_be64(p + kField0, req->exchange_id);
    store_time(p + kField1, req->t1_ns);
    store_be64(p + kField2, 0);
    store_be64(p + kField3, 0);
  } else if (const auto* resp = std::get_if<TimeResponse>(&body)) {
    store_be64(p + kField0, resp->exchange_id);
    store_time(p + kField1, resp->t1_ns);
    store_time(p + kField2, resp->t2_ns);
    store_time(p + kField3, resp->t3_ns);
  } else if (const auto* ka = std::get_if<Keepalive>(&body)) {
    store_be64(p + kField0, ka->counter);
    store_time(p + kField1, ka->interval_ns);
    store_be64(p + kField2, ka->last_rx_counter);
    store_be64(p + kField3, ka->epoch);
    store_be64(p + kField4, ka->echo_epoch);
  }
}

}  // namespace

namespace {

Decoded<ControlBody> checked(const ControlBody& body) noexcept {
  if (auto reason = validate(body)) return *reason;
  return body;
}

}  // namespace

ControlType type_of(const ControlBody& body) noexcept {
  switch (body.index()) {
    case 0:
      return ControlType::kTimeRequest;
    case 1:
      return ControlType::kTimeResponse;
    default:
      return ControlType::kKeepalive;
  }
}

std::size_t body_size(ControlType type) noexcept {
  switch (type) {
    case ControlType::kTimeRequest:
      return kTimeRequestBodySize;
    case ControlType::kTimeResponse:
      return kTimeResponseBodySize;
    case ControlType::kKeepalive:
      return kKeepaliveBodySize;
  }
  return 0;
}

std::optional<DropReason> validate(const ControlBody& body) noexcept {
  if (const auto* req = std::get_if<TimeRequest>(&body)) {
    if (req->t1_ns < 0) return DropReason::kBadTimestamp;
  } else if (const auto* resp = std::get_if<TimeResponse>(&body)) {
    if (resp->t1_ns < 0 || resp->t2_ns < 0 || resp->t3_ns < 0) return DropReason::kBadTimestamp;
    if (resp->t3_ns < resp->t2_ns) return DropReason::kBadControl;
  } else if (const auto* ka = std::get_if<Keepalive>(&body)) {
    if (ka->counter == 0 || ka->epoch == 0) return DropReason::kBadControl;
    if (ka->interval_ns < kMinKeepaliveIntervalNs || ka->interval_ns > kMaxKeepaliveIntervalNs) {
      return DropReason::kBadControl;
    }
  }
  return std::nullopt;
}

Decoded<ControlBody> decode_control(const PacketView& packet) noexcept {
  const TunnelHeader& h = packet.header;
  if (!h.is_control() || h.is_data()) return DropReason::kBadFlags;
  const ControlType type = h.control_type();
  if (!is_known(type)) return DropReason::kBadType;
  if (packet.payload.size() != body_size(type)) return DropReason::kControlLength;
  if (h.cycle_id == 0) return DropReason::kBadControl;  // the sender's epoch

  const std::byte* p = packet.payload.data();
  switch (type) {
    case ControlType::kTimeRequest:
      if (load_be64(p + kField2) != 0 || load_be64(p + kField3) != 0) {
        return DropReason::kReservedSet;
      }
      return checked(TimeRequest{load_be64(p + kField0), load_time(p + kField1)});
    case ControlType::kTimeResponse:
      return checked(TimeResponse{load_be64(p + kField0), load_time(p + kField1),
                                  load_time(p + kField2), load_time(p + kField3)});
    case ControlType::kKeepalive: {
      const Keepalive ka{load_be64(p + kField0), load_time(p + kField1), load_be64(p + kField2),
                         load_be64(p + kField3), load_be64(p + kField4)};
      if (ka.epoch != h.cycle_id) return DropReason::kBadControl;
      return checked(ka);
    }
  }
  return DropReason::kBadType;  // unreachable: is_known(type) above
}

EncodeResult encode_control(const TunnelHeader& header, const ControlBody& body,
                            std::span<std::byte> out) noexcept {
  const ControlType type = type_of(body);
  const std::size_t size = body_size(type);
  TunnelHeader h = header;
  h.flags = kFlagControl | (header.flags & kFlagAuth);  // A: the caller seals it next
  h.type = static_cast<uint8_t>(type);
  h.payload_length = static_cast<uint16_t>(size);
  if (validate(h) || validate(body) || h.cycle_id == 0) return {EncodeStatus::kInvalidHeader, 0};
  if (const auto* ka = std::get_if<Keepalive>(&body); ka != nullptr && ka->epoch != h.cycle_id) {
    return {EncodeStatus::kInvalidHeader, 0};
  }
  if (out.size() < kHeaderSize + size) return {EncodeStatus::kNoSpace, 0};
  if (encode(h, out).status != EncodeStatus::kOk) return {EncodeStatus::kInvalidHeader, 0};
  write_body(body, out.data() + kHeaderSize);
  return {EncodeStatus::kOk, kHeaderSize + size};
}

std::optional<ClockSample> clock_sample(const TimeResponse& response, int64_t t4_ns) noexcept {
  if (validate(ControlBody{response}) || t4_ns < 0) return std::nullopt;
  // All four times are in [0, 2^63), so every difference fits in 65 bits: compute in 128.
  const Int128 t1 = response.t1_ns;
  const Int128 t2 = response.t2_ns;
  const Int128 t3 = response.t3_ns;
  const Int128 t4 = t4_ns;
  const Int128 rtt = (t4 - t1) - (t3 - t2);
  if (rtt < 0 || rtt > std::numeric_limits<int64_t>::max()) return std::nullopt;
  // |offset| < 2^63 because each difference is in (-2^63, 2^63).
  const Int128 offset = ((t2 - t1) + (t3 - t4)) / 2;
  return ClockSample{static_cast<int64_t>(offset), static_cast<int64_t>(rtt)};
}

}  // namespace detwan::dataplane::wire
