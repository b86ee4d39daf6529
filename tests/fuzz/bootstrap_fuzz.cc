// libFuzzer target for the collective library's bootstrap messages
// (collectives/comm/bootstrap_io.h): the join frame a rank sends the root (which the root reads
// from anyone who connects), the root's answer, and the rendezvous spec string.
//
// The first input byte selects (0: join, 1: answer, 2: spec; others: all three), the rest is
// the payload. Invariants: a decoded join re-encodes to the same bytes and its nonce is what
// peek_join_nonce finds in every prefix long enough (and nothing, or the same error, in shorter
// ones); blobs and nonces respect their bounds; a decoded answer re-encodes to the same bytes;
// a parsed spec prints to a string that parses to the same spec.
//
// Built with libFuzzer by the fuzz build (tests/fuzz/meson.build, -Dfuzz=true) and with g++ as
// the corpus replay test fuzz_bootstrap_corpus_test.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tests/fuzz/fuzz_check.h"
#include "collectives/comm/bootstrap_io.h"


namespace detwan::collectives::bootstrap {
namespace {

void check_join(std::string_view payload) {
  const auto join = decode_join(payload);
  // The root peeks at every prefix as bytes arrive: it must never disagree with the full decode.
  for (size_t n = 0; n <= std::min(payload.size(), kJoinNoncePrefixBytes); ++n) {
    const auto peek = peek_join_nonce(payload.substr(0, n));
    if (join && peek && peek->has_value()) FUZZ_CHECK(**peek == join->nonce);
    if (join) FUZZ_CHECK(peek.has_value());  // a valid join's prefix is never refused
  }
  if (!join) {
    FUZZ_CHECK(!join.error().message.empty());
    return;
  }
  FUZZ_CHECK(join->nonce.size() <= kMaxNonceChars);
  FUZZ_CHECK(join->blob.size() <= kMaxBlobBytes);
  const auto full = peek_join_nonce(payload.substr(0, std::min(payload.size(), kJoinNoncePrefixBytes)));
  FUZZ_CHECK(full && full->has_value() && **full == join->nonce);
  const std::string again = encode_join(*join);
  const auto join2 = decode_join(again);
  FUZZ_CHECK(join2.has_value());
  FUZZ_CHECK(join2->nonce == join->nonce && join2->rank == join->rank &&
                       join2->nranks == join->nranks && join2->blob == join->blob);
  FUZZ_CHECK(encode_join(*join2) == again);
}

void check_answer(std::string_view payload) {
  const auto answer = decode_answer(payload);
  if (!answer) {
    FUZZ_CHECK(!answer.error().message.empty());
    return;
  }
  size_t total = 0;
  for (const std::string& blob : *answer) total += blob.size();
  FUZZ_CHECK(total <= payload.size());
  const std::string again = encode_answer_ok(*answer);
  const auto answer2 = decode_answer(again);
  FUZZ_CHECK(answer2.has_value() && *answer2 == *answer);
}

void check_spec(std::string_view text) {
  const auto spec = parse_spec(text);
  if (!spec) {
    FUZZ_CHECK(!spec.error().message.empty());
    return;
  }
  if (spec->kind == Spec::Kind::kTcp) FUZZ_CHECK(spec->port >= 1 && spec->port <= 65535);
  const auto spec2 = parse_spec(spec->to_string());
  FUZZ_CHECK(spec2.has_value());
  FUZZ_CHECK(spec2->kind == spec->kind && spec2->host == spec->host &&
                       spec2->port == spec->port && spec2->dir == spec->dir &&
                       spec2->nonce == spec->nonce);
}

}  // namespace
}  // namespace detwan::collectives::bootstrap

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  namespace b = detwan::collectives::bootstrap;
  if (selector == 0 || selector > 2) b::check_join(body);
  if (selector == 1 || selector > 2) b::check_answer(body);
  if (selector == 2 || selector > 2) b::check_spec(body);
  return 0;
}
