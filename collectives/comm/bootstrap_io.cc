#include "collectives/comm/bootstrap_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/byte_order.h"

namespace detwan::collectives::bootstrap {
namespace {

std::unexpected<Error> bad_spec(std::string_view text, std::string_view why) {
  return make_error(ErrorCode::kInvalidArgument,
                    fmt::format("bad bootstrap spec '{}': {}", text, why));
}

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

std::string errno_text(int err) { return std::strerror(err); }

// Milliseconds left until deadline_ns for poll(), at least 0.
int poll_timeout_ms(int64_t deadline_ns) {
  const int64_t left_ns = deadline_ns - now_ns();
  if (left_ns <= 0) return 0;
  return static_cast<int>(std::min<int64_t>((left_ns + 999'999) / 1'000'000, 1'000'000));
}

Result<addrinfo*> resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints,
                               &result);
  if (rc != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("cannot resolve host '{}': {}", host, ::gai_strerror(rc)));
  }
  return result;
}

// Byte codec over a string: big-endian integers, bounds-checked reads.
class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void bytes(std::string_view v) { out_.append(v); }
  std::string take() { return std::move(out_); }

 private:
  void put(uint32_t v, int n) {
    for (int i = n - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool u8(uint8_t& v) {
    if (in_.size() < 1) return false;
    v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool u16(uint16_t& v) {
    if (in_.size() < 2) return false;
    v = common::load_be16(reinterpret_cast<const uint8_t*>(in_.data()));
    in_.remove_prefix(2);
    return true;
  }
  bool u32(uint32_t& v) {
    if (in_.size() < 4) return false;
    v = common::load_be32(reinterpret_cast<const uint8_t*>(in_.data()));
    in_.remove_prefix(4);
    return true;
  }
  bool bytes(size_t n, std::string& v) {
    if (in_.size() < n) return false;
    v.assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  [[nodiscard]] bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

constexpr std::string_view kJoinMagic = "DWBJ";
constexpr std::string_view kAnswerMagic = "DWBA";

std::unexpected<Error> malformed(std::string_view what, std::string_view why) {
  return make_error(ErrorCode::kInvalidArgument, fmt::format("malformed {}: {}", what, why));
}

Result<void> check_header(Reader& in, std::string_view magic, std::string_view what) {
  std::string got;
  if (!in.bytes(magic.size(), got) || got != magic) return malformed(what, "no magic");
  uint8_t version = 0;
  if (!in.u8(version)) return malformed(what, "truncated");
  if (version != kWireVersion) {
    return malformed(what, fmt::format("version {}, expected {}", version, kWireVersion));
  }
  return {};
}

}  // namespace

std::string Spec::name() const {
  if (kind == Kind::kFile) return "file://" + dir;
  return "tcp://" + join_host_port(host, port);
}

std::string Spec::to_string() const { return nonce ? name() + "#" + *nonce : name(); }

Result<Spec> parse_spec(std::string_view text) {
  Spec spec;
  std::string_view rest;
  if (text.starts_with("tcp://")) {
    spec.kind = Spec::Kind::kTcp;
    rest = text.substr(6);
  } else if (text.starts_with("file://")) {
    spec.kind = Spec::Kind::kFile;
    rest = text.substr(7);
  } else {
    return bad_spec(text, "expected tcp://HOST:PORT or file:///DIR");
  }
  if (const size_t hash = rest.find('#'); hash != std::string_view::npos) {
    std::string_view nonce = rest.substr(hash + 1);
    rest = rest.substr(0, hash);
    if (nonce.empty() || nonce.size() > kMaxNonceChars || !std::ranges::all_of(nonce, is_hex)) {
      return bad_spec(text, fmt::format("nonce must be 1..{} hex digits", kMaxNonceChars));
    }
    std::string lower(nonce);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    spec.nonce = std::move(lower);
  }
  if (spec.kind == Spec::Kind::kFile) {
    if (!rest.starts_with('/')) return bad_spec(text, "the directory must be absolute");
    while (rest.size() > 1 && rest.ends_with('/')) rest.remove_suffix(1);
    spec.dir = std::string(rest);
    return spec;
  }
  std::string_view host;
  std::string_view port_text;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return bad_spec(text, "expected [IPV6]:PORT");
    }
    host = rest.substr(1, close - 1);
    port_text = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return bad_spec(text, "missing :PORT");
    host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return bad_spec(text, "put an IPv6 address in brackets: [ADDR]:PORT");
    }
  }
  if (host.empty()) return bad_spec(text, "empty host");
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' &&
        c != ':' && c != '%') {
      return bad_spec(text, fmt::format("bad character '{}' in host", c));
    }
  }
  int port = 0;
  if (port_text.empty() || port_text.size() > 5 ||
      !std::ranges::all_of(port_text, [](char c) { return c >= '0' && c <= '9'; })) {
    return bad_spec(text, "port must be a number 1..65535");
  }
  for (char c : port_text) port = port * 10 + (c - '0');
  if (port < 1 || port > 65535) return bad_spec(text, "port must be a number 1..65535");
  spec.host = std::string(host);
  spec.port = port;
  return spec;
}

std::string join_host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string format_seconds(int64_t ns) {
  return fmt::format("{:g} s", static_cast<double>(ns) / 1e9);
}

std::string make_nonce() {
  std::random_device device;
  std::string out;
  for (int i = 0; i < 4; ++i) out += fmt::format("{:08x}", static_cast<uint32_t>(device()));
  return out;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

Result<Listener> listen_tcp(const std::string& host, int port, bool reuse_address) {
  auto resolved = resolve(host, port, /*passive=*/true);
  if (!resolved) return std::unexpected(resolved.error());
  std::string last_error = "no address";
  for (addrinfo* ai = *resolved; ai != nullptr; ai = ai->ai_next) {
    common::UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last_error = errno_text(errno);
      continue;
    }
    const int one = 1;
    if (reuse_address) ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      last_error = errno_text(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    const int bound_port = bound.ss_family == AF_INET6
                               ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                               : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    ::freeaddrinfo(*resolved);
    return Listener{std::move(fd), bound_port};
  }
  ::freeaddrinfo(*resolved);
  return make_error(ErrorCode::kIo, fmt::format("cannot listen on {}: {}",
                                                join_host_port(host, port), last_error));
}

Result<common::UniqueFd> connect_tcp(const std::string& host, int port, int64_t deadline_ns,
                                     const std::string& what) {
  int64_t backoff_ns = 2'000'000;
  std::string last_error;
  while (true) {
    auto resolved = resolve(host, port, /*passive=*/false);
    if (!resolved) return std::unexpected(resolved.error());
    for (addrinfo* ai = *resolved; ai != nullptr; ai = ai->ai_next) {
      common::UniqueFd fd(
          ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd.valid()) {
        last_error = errno_text(errno);
        continue;
      }
      if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
        const int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ::freeaddrinfo(*resolved);
        return fd;
      }
      last_error = errno_text(errno);
    }
    ::freeaddrinfo(*resolved);
    const int64_t now = now_ns();
    if (now >= deadline_ns) break;
    // The root may start later than this rank: retry with a short, growing pause (setup code).
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(backoff_ns, deadline_ns - now)));
    backoff_ns = std::min<int64_t>(backoff_ns * 2, 200'000'000);
  }
  return make_error(ErrorCode::kTimeout,
                    fmt::format("{}: cannot reach the root: {}", what, last_error));
}

Result<std::string> local_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return make_error(ErrorCode::kIo, fmt::format("getsockname: {}", errno_text(errno)));
  }
  char text[INET6_ADDRSTRLEN] = {};
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&addr);
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(&addr);
  const void* raw = addr.ss_family == AF_INET6 ? static_cast<const void*>(&v6->sin6_addr)
                                               : static_cast<const void*>(&v4->sin_addr);
  if (::inet_ntop(addr.ss_family, raw, text, sizeof(text)) == nullptr) {
    return make_error(ErrorCode::kIo, fmt::format("inet_ntop: {}", errno_text(errno)));
  }
  return std::string(text);
}

Result<void> send_all(int fd, std::string_view data, int64_t deadline_ns) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return make_error(ErrorCode::kUnavailable, fmt::format("send: {}", errno_text(errno)));
    }
    if (now_ns() >= deadline_ns) return make_error(ErrorCode::kTimeout, "send timed out");
    pollfd pfd{fd, POLLOUT, 0};
    ::poll(&pfd, 1, poll_timeout_ms(deadline_ns));
  }
  return {};
}

Result<std::string> recv_frame(int fd, uint32_t max_bytes, int64_t deadline_ns) {
  std::string buffer;
  size_t want = 4;
  bool have_header = false;
  while (true) {
    while (buffer.size() < want) {
      char chunk[65536];
      const size_t room = std::min(sizeof(chunk), want - buffer.size());
      const ssize_t n = ::recv(fd, chunk, room, MSG_DONTWAIT);
      if (n > 0) {
        buffer.append(chunk, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        return make_error(ErrorCode::kUnavailable, "connection closed before a full frame");
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return make_error(ErrorCode::kUnavailable, fmt::format("recv: {}", errno_text(errno)));
      }
      if (now_ns() >= deadline_ns) return make_error(ErrorCode::kTimeout, "no answer in time");
      pollfd pfd{fd, POLLIN, 0};
      ::poll(&pfd, 1, poll_timeout_ms(deadline_ns));
    }
    if (have_header) return buffer.substr(4);
    const uint32_t length = common::load_be32(reinterpret_cast<const uint8_t*>(buffer.data()));
    if (length > max_bytes) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("frame of {} bytes exceeds the limit of {}", length,
                                    max_bytes));
    }
    have_header = true;
    want = 4 + static_cast<size_t>(length);
    buffer.reserve(want);
  }
}

std::string encode_join(const Join& join) {
  Writer out;
  out.bytes(kJoinMagic);
  out.u8(kWireVersion);
  out.u16(static_cast<uint16_t>(join.nonce.size()));
  out.bytes(join.nonce);
  out.u32(static_cast<uint32_t>(join.rank));
  out.u32(static_cast<uint32_t>(join.nranks));
  out.u32(static_cast<uint32_t>(join.blob.size()));
  out.bytes(join.blob);
  return out.take();
}

Result<Join> decode_join(std::string_view payload) {
  Reader in(payload);
  if (auto ok = check_header(in, kJoinMagic, "join"); !ok) return std::unexpected(ok.error());
  Join join;
  uint16_t nonce_len = 0;
  uint32_t rank = 0;
  uint32_t nranks = 0;
  uint32_t blob_len = 0;
  if (!in.u16(nonce_len) || nonce_len > kMaxNonceChars || !in.bytes(nonce_len, join.nonce) ||
      !in.u32(rank) || !in.u32(nranks) || !in.u32(blob_len) || blob_len > kMaxBlobBytes ||
      !in.bytes(blob_len, join.blob) || !in.done()) {
    return malformed("join", "truncated or oversized");
  }
  join.rank = static_cast<int32_t>(rank);
  join.nranks = static_cast<int32_t>(nranks);
  return join;
}

Result<std::optional<std::string>> peek_join_nonce(std::string_view payload_prefix) {
  Reader in(payload_prefix);
  std::string magic;
  uint8_t version = 0;
  uint16_t nonce_len = 0;
  if (!in.bytes(kJoinMagic.size(), magic) || !in.u8(version) || !in.u16(nonce_len)) {
    // Not enough bytes yet -- unless those that came already are not a join.
    if (!std::string_view(kJoinMagic).starts_with(payload_prefix.substr(0, kJoinMagic.size()))) {
      return malformed("join", "no magic");
    }
    return std::optional<std::string>();
  }
  if (magic != kJoinMagic) return malformed("join", "no magic");
  if (version != kWireVersion) {
    return malformed("join", fmt::format("version {}, expected {}", version, kWireVersion));
  }
  if (nonce_len > kMaxNonceChars) return malformed("join", "oversized nonce");
  std::string nonce;
  if (!in.bytes(nonce_len, nonce)) return std::optional<std::string>();
  return std::optional<std::string>(std::move(nonce));
}

bool equal_secret(std::string_view a, std::string_view b) noexcept {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

Result<std::string> fixed_address_secret(const Spec& spec) {
  const char* env = std::getenv("DETWAN_BOOTSTRAP_SECRET");
  const std::string hint = fmt::format(
      "bootstrap {}: a fixed-address rendezvous needs a shared secret: set "
      "DETWAN_BOOTSTRAP_SECRET to the same 32-64 hex digits on every rank (e.g. `openssl rand "
      "-hex 16`), or let one process create the id (detwanGetUniqueId), whose nonce is the "
      "secret",
      spec.name());
  if (env == nullptr || *env == '\0') return make_error(ErrorCode::kInvalidArgument, hint);
  std::string secret(env);
  for (char& c : secret) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool hex = std::all_of(secret.begin(), secret.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
  if (!hex || secret.size() < 32 || secret.size() > kMaxNonceChars) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{} (DETWAN_BOOTSTRAP_SECRET has {} characters{})", hint,
                                  secret.size(), hex ? "" : ", not all hex digits"));
  }
  return secret;
}

std::string encode_answer_ok(const std::vector<std::string>& blobs) {
  Writer out;
  out.bytes(kAnswerMagic);
  out.u8(kWireVersion);
  out.u8(0);
  out.u32(static_cast<uint32_t>(blobs.size()));
  for (const auto& blob : blobs) {
    out.u32(static_cast<uint32_t>(blob.size()));
    out.bytes(blob);
  }
  return out.take();
}

std::string encode_answer_error(const Error& error) {
  Writer out;
  out.bytes(kAnswerMagic);
  out.u8(kWireVersion);
  out.u8(1);
  out.u8(static_cast<uint8_t>(error.code));
  out.u32(static_cast<uint32_t>(error.message.size()));
  out.bytes(error.message);
  return out.take();
}

Result<std::vector<std::string>> decode_answer(std::string_view payload) {
  Reader in(payload);
  if (auto ok = check_header(in, kAnswerMagic, "answer"); !ok) return std::unexpected(ok.error());
  uint8_t status = 0;
  if (!in.u8(status)) return malformed("answer", "truncated");
  if (status == 1) {
    uint8_t code = 0;
    uint32_t length = 0;
    std::string message;
    if (!in.u8(code) || !in.u32(length) || !in.bytes(length, message)) {
      return malformed("answer", "truncated error");
    }
    const auto error_code = code <= static_cast<uint8_t>(ErrorCode::kInternal)
                                ? static_cast<ErrorCode>(code)
                                : ErrorCode::kInternal;
    // The root's own words; an empty one still has to say what happened.
    if (message.empty()) message = "the bootstrap root refused the join without a reason";
    return make_error(error_code, std::move(message));
  }
  if (status != 0) return malformed("answer", fmt::format("status {}", status));
  uint32_t count = 0;
  if (!in.u32(count) || count > payload.size() / 4) return malformed("answer", "bad rank count");
  std::vector<std::string> blobs(count);
  for (auto& blob : blobs) {
    uint32_t length = 0;
    if (!in.u32(length) || !in.bytes(length, blob)) return malformed("answer", "truncated blob");
  }
  if (!in.done()) return malformed("answer", "trailing bytes");
  return blobs;
}

std::string frame(std::string_view payload) {
  std::string out(4, '\0');
  common::store_be32(reinterpret_cast<uint8_t*>(out.data()), static_cast<uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

}  // namespace detwan::collectives::bootstrap
