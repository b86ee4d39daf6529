#pragma once
// The acceptor's state of authenticated handshakes (docs/transport.md "Authenticated
// channels"): a server answers a HELLO that proves the key with a HELLO_ACK and keeps a
// half-open entry of fixed size, but creates the channel only when the client's first sealed
// datagram opens under the keys both nonces give. So a replayed HELLO costs one HELLO_ACK of
// its own size and an entry that expires; it never opens a channel.
//
// Bounds: at most kMaxHalfOpen entries per endpoint (lane); a new HELLO when the table is full
// takes the oldest entry's place (counted). Entries expire after kHalfOpenTimeoutNs. Answers
// wait in a fixed queue of kMaxAnswers until the next transmit round (more are dropped,
// counted): nothing here grows with what a peer sends.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/crypto/crypto.h"
#include "transport/datagram/link.h"
#include "transport/proto/handshake.h"

namespace detwan::transport::datagram {

inline constexpr size_t kMaxHalfOpen = 256;
inline constexpr int64_t kHalfOpenTimeoutNs = 10'000'000'000;
inline constexpr size_t kMaxAnswers = 64;
inline constexpr size_t kMaxAnswerBytes =
    proto::wire::kHeaderBytes + proto::wire::kSealedHelloBodyBytes;

template <typename Address>
struct HalfOpen {
  uint64_t connection_id = 0;
  crypto::Nonce client_nonce{};
  crypto::Nonce server_nonce{};
  proto::AcceptedHandshake handshake;  // keys, the client's HELLO
  SocketId socket = 0;
  Address source{};
  int64_t created_ns = 0;
};

template <typename Address>
class HalfOpenTable {
 public:
  using Entry = HalfOpen<Address>;

  // The entry of this connection id (whole id, or its low 32 bits for DATA), or nullptr.
  Entry* find(uint64_t connection_id, bool short_form, int64_t now_ns) {
    for (size_t i = 0; i < count_; ++i) {
      Entry& e = entries_[i];
      const bool match = short_form ? static_cast<uint32_t>(e.connection_id) == connection_id
                                    : e.connection_id == connection_id;
      if (match) {
        if (now_ns - e.created_ns < kHalfOpenTimeoutNs) return &e;
        remove(&e);
        return nullptr;
      }
    }
    return nullptr;
  }

  // A slot for a new entry: a free one, an expired one, else the oldest (*evicted = true).
  Entry& insert(int64_t now_ns, bool* evicted) {
    *evicted = false;
    if (count_ < kMaxHalfOpen) return entries_[count_++] = Entry{};
    Entry* oldest = &entries_[0];
    for (size_t i = 0; i < count_; ++i) {
      if (entries_[i].created_ns < oldest->created_ns) oldest = &entries_[i];
    }
    *evicted = now_ns - oldest->created_ns < kHalfOpenTimeoutNs;
    return *oldest = Entry{};
  }

  void remove(Entry* e) {
    *e = entries_[count_ - 1];
    --count_;
  }

  [[nodiscard]] size_t size() const { return count_; }

 private:
  std::array<Entry, kMaxHalfOpen> entries_{};
  size_t count_ = 0;
};

// A handshake answer (HELLO_ACK or the plain protocol's mismatch CLOSE) waiting to be sent.
template <typename Address>
struct Answer {
  SocketId socket = 0;
  Address destination{};
  size_t size_bytes = 0;
  std::array<std::byte, kMaxAnswerBytes> bytes{};
};

}  // namespace detwan::transport::datagram
