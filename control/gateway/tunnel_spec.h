#pragma once
// What the agent wants on one gateway for one reservation, and how it is said to detwan-gw
// (the `apply` vocabulary of its admin socket, docs/gateway.md "Control channel").
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "control/reservation/tunnel_keys.h"

namespace detwan::control::gateway {

// What detwan-gw adds to each inner IP packet on the WAN (docs/wire-format.md): outer IPv4 20 +
// UDP 8 + tunnel header 40; and what its scheduler counts against a tunnel's rate per frame:
// that + Ethernet header and FCS 18. Checked against dataplane/wire/header.h in
// tests/control/gateway (control/ does not link the dataplane).
inline constexpr uint32_t kEncapOverheadBytes = 68;
inline constexpr uint32_t kFrameOverheadBytes = kEncapOverheadBytes + 18;
// An encrypted tunnel's packets carry a 16-byte AEAD tag after the payload.
inline constexpr uint32_t kAeadTagBytes = 16;

struct TunnelSpec {
  uint32_t id = 0;
  std::string peer;
  std::string owner;  // "agent:<name>": the agent only ever changes or removes its own tunnels
  uint64_t rate_bps = 0;
  std::vector<uint32_t> slots;  // sorted
  uint64_t burst_bytes = 0;
  int64_t bound_ns = 0;  // on-time playout bound; 0 = deliver on receipt
  int64_t max_hold_ns = 1'000'000'000;
  uint32_t dscp = 46;
  std::vector<std::string> match_dst;  // prefixes, as the gateway prints them
  // The tenant: only these hosts' packets enter the tunnel, and at this end only packets to
  // them from match_dst leave it (docs/gateway.md, "match"). Empty: any source.
  std::vector<std::string> match_src;
  // 1+1 protection: the peer (on this gateway) of the disjoint path and the tunnel's slots on
  // its port; "" = unprotected.
  std::string protect_peer;
  std::vector<uint32_t> protect_slots;  // sorted
  // Authenticated, encrypted tunnel (docs/gateway.md, "auth"): cipher name ("" = none), the
  // keys with their secrets (64 hex digits) and the id of the one that seals.
  // With key_exchange "x25519" the keys carry a context instead of a secret and the gateway
  // derives each secret from its identity key and peer_public_key (docs/gateway.md, "Identity
  // key"): the `auth` sent is {cipher, key_exchange, peer_public_key, keys: [{id, context}],
  // tx_key}.
  struct Key {
    Key() = default;
    Key(uint8_t key_id, std::string key_secret_hex, std::string key_context = {})
        : id(key_id), secret_hex(std::move(key_secret_hex)), context(std::move(key_context)) {}
    uint8_t id = 0;
    std::string secret_hex;
    std::string context;
    friend bool operator==(const Key&, const Key&) = default;
  };
  std::string cipher;
  std::vector<Key> keys;
  uint8_t tx_key = 0;
  std::string key_exchange;     // "" (secrets) or "x25519"
  std::string peer_public_key;  // x25519: the far gateway's, base64
  std::string reservation;      // "r-3" (for reports; not sent)

  // The tunnel as an item of an `apply` request.
  [[nodiscard]] boost::json::object to_request() const;
  // Does the gateway's description of a tunnel ({"cmd":"tunnels"} item) match this spec?
  // If not, *difference names the first field that differs. Keys are compared by id and
  // fingerprint (the gateway never shows a secret).
  [[nodiscard]] bool matches(const boost::json::object& actual, std::string* difference) const;
  friend bool operator==(const TunnelSpec&, const TunnelSpec&) = default;

 private:
  [[nodiscard]] bool auth_matches(const boost::json::value* auth) const;
};

// The auth of `spec` (cipher, keys, tx_key and, with key exchange, key_exchange and the far
// gateway's public key) from a reservation's keys, for the gateway at end `end` (0 or 1) of the
// tunnel: with x25519 keys its peer's public key is keys.public_keys[1 - end]. cipher "none"
// leaves the spec unauthenticated. For a federated tunnel the local gateway is end 0 of
// reservation::x25519_keys(cipher, local, remote, ...).
void set_auth(TunnelSpec& spec, const std::string& cipher, const reservation::TunnelKeys& keys,
              int end);

}  // namespace detwan::control::gateway
