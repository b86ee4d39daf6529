#include "collectives/comm/bootstrap_io.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collectives/crypto.h"
#include "common/byte_order.h"

namespace detwan::collectives::bootstrap {
namespace {

// The spec as errors show it: never with its secret.
std::string redacted(std::string_view text) {
  const size_t hash = text.find('#');
  if (hash == std::string_view::npos) return std::string(text);
  return std::string(text.substr(0, hash)) + "#<secret>";
}

std::unexpected<Error> bad_spec(std::string_view text, std::string_view why) {
  return make_error(ErrorCode::kInvalidArgument,
                    fmt::format("bad bootstrap spec '{}': {}", redacted(text), why));
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
  const int rc =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("cannot resolve host '{}': {}", host, ::gai_strerror(rc)));
  }
  return result;
}

}  // namespace

std::string Spec::name() const {
  if (kind == Kind::kFile) return "file://" + dir;
  return "tcp://" + join_host_port(host, port);
}

std::string Spec::to_string() const { return secret ? name() + "#" + *secret : name(); }

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
    std::string_view secret = rest.substr(hash + 1);
    rest = rest.substr(0, hash);
    if (secret.size() < kMinSecretChars || secret.size() > kMaxSecretChars ||
        !std::ranges::all_of(secret, is_hex)) {
      return bad_spec(text,
                      fmt::format("the secret after '#' must be {} to {} hex digits (got {} "
                                  "characters{}): e.g. `openssl rand -hex 16`",
                                  kMinSecretChars, kMaxSecretChars, secret.size(),
                                  std::ranges::all_of(secret, is_hex) ? "" : ", not all hex"));
    }
    std::string lower(secret);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    spec.secret = std::move(lower);
  }
  if (spec.kind == Spec::Kind::kFile) {
    if (!rest.starts_with('/')) return bad_spec(text, "the directory must be absolute");
    while (rest.size() > 1 && rest.ends_with('/')) rest.remove_suffix(1);
    spec.dir = std::string(rest);
    return spec;
  }
  auto endpoint = common::parse_endpoint(rest);
  if (!endpoint) return bad_spec(text, endpoint.error().message);
  spec.host = std::move(endpoint->host);
  spec.port = endpoint->port;
  return spec;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string format_seconds(int64_t ns) {
  return fmt::format("{:g} s", static_cast<double>(ns) / 1e9);
}

Result<std::string> make_secret() { return crypto::random_hex(kMinSecretChars / 2); }

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
  return make_error(ErrorCode::kIo,
                    fmt::format("cannot listen on {}: {}", join_host_port(host, port), last_error));
}

Result<common::UniqueFd> connect_tcp(const std::string& host, int port, int64_t deadline_ns,
                                     const std::string& what) {
  int64_t backoff_ns = 2'000'000;
  std::string last_error;
  while (true) {
    auto resolved = resolve(host, port, /*passive=*/false);
    if (!resolved) return std::unexpected(resolved.error());
    for (addrinfo* ai = *resolved; ai != nullptr; ai = ai->ai_next) {
      common::UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
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

namespace {

// Appends to `buffer` until it holds `want` bytes.
Result<void> recv_until(int fd, std::string& buffer, size_t want, int64_t deadline_ns) {
  while (buffer.size() < want) {
    char chunk[65536];
    const size_t room = std::min(sizeof(chunk), want - buffer.size());
    const ssize_t n = ::recv(fd, chunk, room, MSG_DONTWAIT);
    if (n > 0) {
      buffer.append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return make_error(ErrorCode::kUnavailable, "connection closed before a full frame");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return make_error(ErrorCode::kUnavailable, fmt::format("recv: {}", errno_text(errno)));
    }
    if (now_ns() >= deadline_ns) return make_error(ErrorCode::kTimeout, "no answer in time");
    pollfd pfd{fd, POLLIN, 0};
    ::poll(&pfd, 1, poll_timeout_ms(deadline_ns));
  }
  return {};
}

}  // namespace

Result<std::string> recv_exact(int fd, size_t n, int64_t deadline_ns) {
  std::string buffer;
  if (auto ok = recv_until(fd, buffer, n, deadline_ns); !ok) return std::unexpected(ok.error());
  return buffer;
}

Result<std::string> recv_frame(int fd, size_t max_bytes, int64_t deadline_ns) {
  std::string header;
  if (auto ok = recv_until(fd, header, 4, deadline_ns); !ok) return std::unexpected(ok.error());
  const uint32_t length = read_length_prefix(header);
  if (length > max_bytes) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("a frame of {} bytes exceeds the limit of {}", length, max_bytes));
  }
  std::string body;
  body.reserve(length);
  if (auto ok = recv_until(fd, body, length, deadline_ns); !ok) {
    return std::unexpected(ok.error());
  }
  return body;
}

Result<std::string> environment_secret(const Spec& spec) {
  const char* env = std::getenv("DETWAN_BOOTSTRAP_SECRET");
  const std::string hint =
      spec.kind == Spec::Kind::kTcp
          ? fmt::format(
                "bootstrap {}: a fixed-address rendezvous needs a shared secret: set "
                "DETWAN_BOOTSTRAP_SECRET to the same 32-64 hex digits on every rank "
                "(e.g. `openssl rand -hex 16`), or let one process create the id "
                "(detwanGetUniqueId), which carries one",
                spec.name())
          : fmt::format(
                "bootstrap {}: a file rendezvous needs a secret: {}#SECRET or "
                "DETWAN_BOOTSTRAP_SECRET, 32-64 hex digits, the same for every rank "
                "(e.g. `openssl rand -hex 16`); without one, anyone who can write the "
                "directory could join as any rank",
                spec.name(), spec.name());
  if (env == nullptr || *env == '\0') return make_error(ErrorCode::kInvalidArgument, hint);
  std::string secret(env);
  for (char& c : secret) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool hex = std::all_of(secret.begin(), secret.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
  if (!hex || secret.size() < kMinSecretChars || secret.size() > kMaxSecretChars) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{} (DETWAN_BOOTSTRAP_SECRET has {} characters{})", hint,
                                  secret.size(), hex ? "" : ", not all hex digits"));
  }
  return secret;
}

}  // namespace detwan::collectives::bootstrap
