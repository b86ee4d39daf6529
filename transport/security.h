#pragma once
// Who may talk to a transport endpoint (docs/transport.md, "Authenticated channels").
//
// Every endpoint of a network backend (udp, tcp) serves one key: a HELLO that does not prove
// knowledge of it creates nothing, and every datagram (udp) or frame (tcp) of a channel is
// authenticated with per-connection, per-direction keys derived from it and from both sides'
// fresh hello nonces (HKDF-SHA256), so a datagram sealed by one side never opens at the other
// side's own receiver and nothing captured from one connection opens in another.
//
//   kAuthenticate  every datagram/frame carries an AEAD tag over its bytes (payload in clear)
//   kEncrypt       the payload is encrypted as well (end to end, for owners who do not trust
//                  even their own site network; collectives: DETWAN_ENCRYPT=1)
//   kNone          no authentication: only when asked for by name (tests of the plain
//                  protocol, benchmarks of the unauthenticated path)
//
// The default is kAuthenticate with no key, which udp, tcp and loopback refuse at
// listen()/connect() with an error saying how to give one: there is no unauthenticated
// channel unless someone wrote kNone. loopback runs every mode (it runs the same protocol, so
// the same checks, with fault injection) and needs a key like udp; shm admits only peers of the
// endpoint's own uid (SO_PEERCRED) whatever the mode; verbs ignores the field (inside a site's
// RDMA fabric).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace detwan::transport {

enum class SecurityMode : uint8_t { kNone = 0, kAuthenticate = 1, kEncrypt = 2 };
[[nodiscard]] constexpr std::string_view to_string(SecurityMode mode) noexcept {
  return mode == SecurityMode::kNone           ? "none"
         : mode == SecurityMode::kAuthenticate ? "authenticate"
                                               : "encrypt";
}

inline constexpr std::size_t kSecurityKeyBytes = 32;
using SecurityKey = std::array<std::byte, kSecurityKeyBytes>;

struct Security {
  SecurityMode mode = SecurityMode::kAuthenticate;
  // The pre-shared key of the job (a communicator derives it from its bootstrap secret).
  SecurityKey key{};
  bool has_key = false;
  // Mixed into every derived key: two uses of one secret with different contexts (two
  // communicators, a test and a benchmark) cannot open each other's datagrams. May be empty.
  std::string context;

  // Conveniences: the unauthenticated mode, asked for by name; a keyed one.
  [[nodiscard]] static Security none() {
    Security s;
    s.mode = SecurityMode::kNone;
    return s;
  }
  [[nodiscard]] static Security keyed(const SecurityKey& key, SecurityMode mode,
                                      std::string context = {}) {
    Security s;
    s.mode = mode;
    s.key = key;
    s.has_key = true;
    s.context = std::move(context);
    return s;
  }
};

}  // namespace detwan::transport
