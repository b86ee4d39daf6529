// libFuzzer target for the collective library's bootstrap messages
// (collectives/comm/bootstrap_codec.h, bootstrap_keys.h): what the root reads from anyone who
// connects (hello, proof, sealed join), what a joiner reads from whatever listens at the root's
// address (challenge, sealed answer), and the rendezvous spec string.
//
// The first input byte selects (0: join, 1: answer, 2: spec, 3: handshake messages, 4: sealed
// frame; others: all), the rest is the payload. Invariants: every decoder either refuses with a
// message or returns a value that re-encodes to the same bytes; blobs respect their bounds; an
// answer decodes only with exactly the rank count asked for (the payload's first byte), and
// never for an input smaller than its blobs; a sealed frame opens only if it is exactly what
// sealing its plaintext gives, and what is sealed always opens to itself (and not under
// another counter); a parsed spec prints to a string that parses to the same spec.
//
// Built with libFuzzer by the fuzz build (tests/fuzz/meson.build, -Dfuzz=true) and with g++ as
// the corpus replay test fuzz_bootstrap_corpus_test.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "collectives/comm/bootstrap_codec.h"
#include "collectives/comm/bootstrap_io.h"
#include "collectives/comm/bootstrap_keys.h"
#include "tests/fuzz/fuzz_check.h"

namespace detwan::collectives::bootstrap {
namespace {

void check_join(std::string_view payload) {
  const auto join = decode_join(payload);
  if (!join) {
    FUZZ_CHECK(!join.error().message.empty());
    return;
  }
  FUZZ_CHECK(join->blob.size() <= kMaxBlobBytes);
  FUZZ_CHECK(payload.size() <= kMaxJoinPayloadBytes);
  FUZZ_CHECK(encode_join(*join) == payload);
}

void check_answer(std::string_view body) {
  if (body.empty()) return;
  const auto nranks = static_cast<int32_t>(static_cast<uint8_t>(body[0]));
  const std::string_view payload = body.substr(1);
  const auto answer = decode_answer(payload, nranks);
  if (!answer) {
    FUZZ_CHECK(!answer.error().message.empty());
    return;
  }
  FUZZ_CHECK(answer->size() == static_cast<size_t>(nranks));
  FUZZ_CHECK(payload.size() <= max_answer_payload_bytes(nranks));
  size_t total = 0;
  for (const std::string& blob : *answer) {
    FUZZ_CHECK(blob.size() <= kMaxBlobBytes);
    total += blob.size();
  }
  FUZZ_CHECK(total <= payload.size());
  FUZZ_CHECK(encode_answer_ok(*answer) == payload);
  // The same bytes with another rank count are refused.
  FUZZ_CHECK(!decode_answer(payload, nranks + 1).has_value());
}

void check_spec(std::string_view text) {
  const auto spec = parse_spec(text);
  if (!spec) {
    FUZZ_CHECK(!spec.error().message.empty());
    return;
  }
  if (spec->kind == Spec::Kind::kTcp) FUZZ_CHECK(spec->port >= 1 && spec->port <= 65535);
  if (spec->secret) {
    FUZZ_CHECK(spec->secret->size() >= kMinSecretChars && spec->secret->size() <= kMaxSecretChars);
  }
  const auto spec2 = parse_spec(spec->to_string());
  FUZZ_CHECK(spec2.has_value());
  FUZZ_CHECK(spec2->kind == spec->kind && spec2->host == spec->host && spec2->port == spec->port &&
             spec2->dir == spec->dir && spec2->secret == spec->secret);
}

void check_handshake(std::string_view bytes) {
  if (auto hello = decode_hello(bytes)) {
    FUZZ_CHECK(bytes.size() == kHelloBytes && encode_hello(*hello) == bytes);
  }
  if (auto challenge = decode_challenge(bytes)) {
    FUZZ_CHECK(bytes.size() == kChallengeBytes && encode_challenge(*challenge) == bytes);
  }
  if (auto proof = decode_proof(bytes)) {
    FUZZ_CHECK(bytes.size() == kProofBytes && encode_proof(*proof) == bytes);
  }
}

void check_sealed(std::string_view body) {
  crypto::Key key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::byte>(i * 7 + 1);
  if (auto opened = open_frame(key, 0, body)) {
    auto again = seal_frame(key, 0, *opened);
    FUZZ_CHECK(again.has_value() && std::string_view(*again).substr(4) == body);
  }
  const std::string_view payload = body.substr(0, std::min<size_t>(body.size(), 4096));
  auto sealed = seal_frame(key, 0, payload);
  FUZZ_CHECK(sealed.has_value());
  FUZZ_CHECK(read_length_prefix(*sealed) == sealed->size() - 4);
  const std::string_view sealed_body = std::string_view(*sealed).substr(4);
  auto opened = open_frame(key, 0, sealed_body);
  FUZZ_CHECK(opened.has_value() && *opened == payload);
  FUZZ_CHECK(!open_frame(key, 1, sealed_body).has_value());
}

}  // namespace
}  // namespace detwan::collectives::bootstrap

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  namespace b = detwan::collectives::bootstrap;
  const bool all = selector > 4;
  if (selector == 0 || all) b::check_join(body);
  if (selector == 1 || all) b::check_answer(body);
  if (selector == 2 || all) b::check_spec(body);
  if (selector == 3 || all) b::check_handshake(body);
  if (selector == 4 || all) b::check_sealed(body);
  return 0;
}
