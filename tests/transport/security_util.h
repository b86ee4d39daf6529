#pragma once
// The key the transport tests share (transport/security.h): channels in tests authenticate like
// the product's, unless a test of the plain protocol says Security::none() by name.
#include <cstddef>
#include <string>

#include "transport/transport.h"

namespace detwan::transport::testing {

// A fixed test key (bytes 0x00, 0x01, ... 0x1f), or another one for "wrong key" tests.
inline SecurityKey test_key(uint8_t first = 0) {
  SecurityKey key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::byte>(first + i);
  return key;
}

inline Security test_security(SecurityMode mode = SecurityMode::kAuthenticate,
                              std::string context = "transport-tests") {
  if (mode == SecurityMode::kNone) return Security::none();
  return Security::keyed(test_key(), mode, std::move(context));
}

// Endpoint options with the test key (the default of every test that does not test security).
inline EndpointOptions keyed_options(SecurityMode mode = SecurityMode::kAuthenticate) {
  EndpointOptions options;
  options.security = test_security(mode);
  return options;
}

}  // namespace detwan::transport::testing
