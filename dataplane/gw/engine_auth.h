#pragma once
// Private: a tunnel's AEAD state in the engine (docs/wire-format.md, "Authenticated tunnels" and
// "Key schedule"). make_auth() is setup tier (builds OpenSSL contexts, may allocate, returns
// errors); set_peer_epoch() runs on the datapath thread when a peer's epoch changes (derives
// keys into the existing contexts: no allocation of ours, no exceptions); seal_frame and
// open_frame run per packet: no allocation, no exceptions, outcomes counted.
//
// Each configured secret (a key slot) gives four keys (aead/key_schedule.h): this gateway's
// control key K_ctl(own epoch), the peer's control key K_ctl(peer epoch), and the two data keys
// K_data(own -> peer) and K_data(peer -> own). Data keys exist only once the peer's epoch is
// known (authenticated from its keepalive): before that the tunnel sends no data
// (awaiting_peer) and opens none. A control packet from an epoch that is not the peer's current
// one is opened with a candidate key K_ctl(that epoch), derived at most at the engine's
// candidate rate; the engine then decides (engine_control.cc) whether that epoch is a genuine
// restart.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "dataplane/aead/aead.h"
#include "dataplane/aead/key_schedule.h"
#include "dataplane/gw/config.h"

namespace detwan::dataplane::gw {

// Why an authenticated tunnel (or a packet claiming authentication) was refused.
enum class AuthDrop : uint8_t {
  kMissing = 0,   // the tunnel has keys, the packet has no flag A
  kUnexpected,    // flag A on a tunnel without keys
  kTruncated,     // payload shorter than the tag
  kFailed,        // no key held opens it (forged, corrupted, another key, epoch or direction)
  kReflected,     // a control packet carrying this gateway's own epoch: its own, sent back
  kAwaitingPeer,  // data before the peer's epoch is known: no data key yet (sent or received)
  kRateLimited,   // a control packet from an unknown epoch beyond the candidate key rate
  kCount
};
inline constexpr int kAuthDropCount = static_cast<int>(AuthDrop::kCount);
std::string_view to_string(AuthDrop reason) noexcept;  // "auth_missing", ...

struct AuthKeySlot {
  uint8_t id = 0;
  aead::Key secret{};
  aead::AeadKey tx_control;         // K_ctl(own epoch)
  aead::AeadKey rx_control;         // K_ctl(peer epoch), once known
  aead::AeadKey candidate_control;  // K_ctl(candidate epoch)
  aead::AeadKey tx_data;            // K_data(own -> peer), once the peer's epoch is known
  aead::AeadKey rx_data;            // K_data(peer -> own), idem
  uint64_t opened_packets = 0;      // packets this slot's keys opened
};

struct AuthCounters {
  uint64_t sealed_packets = 0;  // data and control packets sealed
  uint64_t seal_failed = 0;     // could not seal (no room for the tag, OpenSSL): not sent
  uint64_t opened_packets = 0;  // data and control packets opened
  uint64_t new_sessions = 0;    // sender sessions first opened (a peer start or key change)
  uint64_t key_derivations = 0;        // HKDF runs for a new peer epoch (keys x 3)
  uint64_t candidate_derivations = 0;  // control keys derived for an unknown epoch
  std::array<uint64_t, kAuthDropCount> drops{};
};

// What make_auth needs from the engine: its own epoch, where sessions are numbered, the HKDF.
struct AuthEnv {
  uint64_t own_epoch = 0;
  uint32_t next_session = 1;  // per engine, +1 per new transmit session: never repeats in a boot
  aead::KeyDeriver* deriver = nullptr;
};

struct TunnelAuthState {
  aead::Cipher cipher = aead::Cipher::kAes256Gcm;
  uint32_t tunnel_id = 0;
  uint64_t own_epoch = 0;
  uint64_t peer_epoch = 0;       // rx_control and the data keys are for it; 0: not known yet
  uint64_t candidate_epoch = 0;  // candidate_control is for it; 0: none
  std::vector<AuthKeySlot> keys;  // 1 or 2
  uint32_t tx = 0;                // index in keys of the transmit key
  uint32_t tx_session = 0;        // this gateway's session for the tunnel (never 0)
  // The last two sender sessions a key opened, and which key: a genuine packet costs one open.
  struct RxSession {
    uint32_t session = 0;
    uint32_t key = 0;
  };
  std::array<RxSession, 2> rx{};
  uint32_t rx_next = 0;
  AuthCounters counters;
  [[nodiscard]] bool has_data_keys() const noexcept { return peer_epoch != 0; }
};

// The state for `config` of tunnel `tunnel_id`, toward a peer whose epoch is `peer_epoch` (0:
// not known yet). With `previous` (a modify), what still applies carries over: the counters;
// the transmit session if the transmit key is the same (same id and secret), else a new one from
// env; the remembered receive sessions of keys still held.
common::Result<std::unique_ptr<TunnelAuthState>> make_auth(const TunnelAuth& config,
                                                           uint32_t tunnel_id, uint64_t peer_epoch,
                                                           const TunnelAuthState* previous,
                                                           AuthEnv& env);

// Derives the peer's control key and both data keys of every slot for the peer's epoch `epoch`
// (!= 0, != own epoch). The peer's sessions are forgotten (they belong to its earlier boot).
// False if OpenSSL failed: the tunnel then has no data keys (peer_epoch 0).
bool set_peer_epoch(TunnelAuthState& auth, uint64_t epoch, aead::KeyDeriver& deriver) noexcept;
// Derives candidate_control of every slot for `epoch` unless it is already the candidate.
bool set_candidate_epoch(TunnelAuthState& auth, uint64_t epoch,
                         aead::KeyDeriver& deriver) noexcept;

// `frame` = an encoded header (flag A, session) + plaintext_bytes + room for the tag: seals it
// with the transmit slot's control or data key. Returns the packet size, or 0 (counted:
// seal_failed, or awaiting_peer for data without data keys).
std::size_t seal_frame(TunnelAuthState& auth, std::span<std::byte> frame,
                       std::size_t plaintext_bytes, bool control) noexcept;
// `datagram` = a decoded packet with flag A and this session: opens it in place, data with
// rx_data, control with rx_control when `epoch` (the header's, control only) is the peer's and
// with candidate_control when it is the candidate. Returns the plaintext size, or nullopt with
// *why, counted on the tunnel.
std::optional<std::size_t> open_frame(TunnelAuthState& auth, std::span<std::byte> datagram,
                                      uint32_t session, bool control, uint64_t epoch,
                                      AuthDrop* why) noexcept;

}  // namespace detwan::dataplane::gw
