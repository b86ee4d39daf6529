// The agent's HTTPS server and the https client against a throwaway PKI (test_pki.h): the
// right CA works and a wrong one is refused on either side, plain HTTP to the TLS port is
// closed, a peer certificate's domain reaches the handler, a client without a certificate is
// refused when one is required, a silent client is closed, host names are checked, and scoped
// tokens ride on TLS. Servers on 127.0.0.1, port 0.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio.hpp>
#include <boost/json.hpp>
#pragma GCC diagnostic pop

#include "control/api/http_server.h"
#include "control/client/http_client.h"
#include "tests/control/api/test_pki.h"

namespace detwan::control::api {
namespace {

using client::http_call;
using client::TlsClientOptions;
using testing::Issued;
using testing::TestPki;

// Answers 200 with the request's identity as JSON, and keeps the identities it saw.
struct IdentityEcho {
  std::mutex mutex;
  std::vector<Identity> seen;
  Handler handler() {
    return [this](HttpRequest request, Respond respond) {
      const Identity& who = request.identity;
      boost::json::object body{{"kind", static_cast<int>(who.kind)},
                               {"name", who.name},
                               {"tenant", who.tenant},
                               {"domain", who.domain},
                               {"issuer_sha256", who.issuer_sha256},
                               {"may_reserve", who.may_reserve},
                               {"may_admin", who.may_admin}};
      {
        std::lock_guard lock(mutex);
        seen.push_back(who);
      }
      HttpResponse response;
      response.body = boost::json::serialize(body);
      respond(std::move(response));
    };
  }
};

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "detwan-tls-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    pki_ = std::make_unique<TestPki>(dir_);
    ca_x_ = pki_->ca("ca-x");
    ca_y_ = pki_->ca("ca-y");
    server_ = pki_->leaf("agent-x", "agent-x", ca_x_, "IP:127.0.0.1,URI:detwan://domain/x");
    peer_y_ = pki_->leaf("agent-y", "agent-y", ca_y_, "IP:127.0.0.1,URI:detwan://domain/y");
    rogue_ = pki_->leaf("rogue", "y", pki_->ca("ca-rogue"), "URI:detwan://domain/y");
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  HttpServerOptions options(const std::string& client_ca = "", bool require = false) {
    HttpServerOptions o;
    o.listen = *common::parse_host_port("127.0.0.1:0", true);
    o.allow = {*common::parse_ip_prefix("127.0.0.0/8")};
    o.tls.cert_file = server_.cert_file;
    o.tls.key_file = server_.key_file;
    o.tls.client_ca_file = client_ca;
    o.tls.require_client_cert = require;
    return o;
  }
  static client::Url url(const std::unique_ptr<HttpServer>& server, bool https = true) {
    return *client::parse_url(
        fmt::format("{}://127.0.0.1:{}", https ? "https" : "http", server->local_endpoint().port));
  }
  std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    std::filesystem::permissions(path, std::filesystem::perms(0600));
    return path;
  }

  std::string dir_;
  std::unique_ptr<TestPki> pki_;
  Issued ca_x_, ca_y_, server_, peer_y_, rogue_;
};

// The server counts a refused handshake on its own thread, after the client may already have
// seen the failure (TLS 1.3 sends the server's alert after the client's Finished): wait for it.
template <typename Read>
uint64_t settled_count(Read read, uint64_t want) {
  for (int i = 0; i < 500 && read() < want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return read();
}

TEST_F(TlsTest, ParseUrlAcceptsHttps) {
  const auto u = client::parse_url("https://agent.example:7443/base");
  ASSERT_TRUE(u.has_value()) << u.error().message;
  EXPECT_TRUE(u->https);
  EXPECT_EQ(u->host, "agent.example");
  EXPECT_EQ(u->port, "7443");
  EXPECT_EQ(u->base_path, "/base");
  EXPECT_EQ(client::parse_url("https://10.0.0.1")->port, "443");
  EXPECT_FALSE(client::parse_url("http://10.0.0.1")->https);
}

TEST_F(TlsTest, HttpsCallSucceedsWithTheRightCaAndFailsWithAWrongOne) {
  IdentityEcho echo;
  auto server = HttpServer::start(options(), echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const TlsClientOptions right{ca_x_.cert_file, "", ""};
  auto ok = http_call(url(*server), "GET", "/v1/topology", "", "", 5000, "test", &right);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(boost::json::parse(ok->body).at("kind").as_int64(),
            static_cast<int>(Identity::Kind::kAnonymous));
  // The client refuses a server its CA did not sign, naming the URL and the reason.
  const TlsClientOptions wrong{ca_y_.cert_file, "", ""};
  auto refused = http_call(url(*server), "GET", "/v1/topology", "", "", 5000, "test", &wrong);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("certificate verify failed"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("https://127.0.0.1:"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(echo.seen.size(), 1u);
}

TEST_F(TlsTest, TheServerCertificateMustNameTheHostAsked) {
  // Its certificate names 127.0.0.1 only: asked as 127.0.0.2 (same server) it is refused.
  IdentityEcho echo;
  auto o = options();
  o.listen = *common::parse_host_port("0.0.0.0:0", true);
  auto server = HttpServer::start(o, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const TlsClientOptions right{ca_x_.cert_file, "", ""};
  const auto other =
      *client::parse_url(fmt::format("https://127.0.0.2:{}", (*server)->local_endpoint().port));
  auto refused = http_call(other, "GET", "/healthz", "", "", 5000, "test", &right);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("certificate verify failed"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("mismatch"), std::string::npos) << refused.error().message;
}

TEST_F(TlsTest, PlainHttpToTheTlsPortIsClosedAndCounted) {
  IdentityEcho echo;
  auto server = HttpServer::start(options(), echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  auto refused = http_call(url(*server, false), "GET", "/healthz", "", "", 5000, "test");
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(echo.seen.empty());
  EXPECT_EQ(settled_count([&] { return (*server)->counters().refused_tls; }, 1), 1u);
  EXPECT_EQ((*server)->counters().refused_cert, 0u);
  // As /metrics shows it.
  const std::string text = http_counters_text((*server)->counters());
  EXPECT_NE(text.find("detwan_agent_http_connections_total{outcome=\"refused_tls\"} 1\n"),
            std::string::npos)
      << text;
}

TEST_F(TlsTest, TlsOptionsWithAnHttpUrlAreRefusedBeforeSendingAToken) {
  const TlsClientOptions tls{ca_x_.cert_file, "", ""};
  auto refused = http_call(*client::parse_url("http://127.0.0.1:9"), "GET", "/healthz", "",
                           "secret-token-0123456789", 1000, "test", &tls);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("use https://"), std::string::npos)
      << refused.error().message;
}

TEST_F(TlsTest, APeerCertificateNamesTheDomainInTheIdentity) {
  IdentityEcho echo;
  // The server trusts its own CA and domain y's.
  const std::string cas = write_file("cas.pem", [&] {
    std::ifstream x(ca_x_.cert_file), y(ca_y_.cert_file);
    std::stringstream s;
    s << x.rdbuf() << y.rdbuf();
    return s.str();
  }());
  auto server = HttpServer::start(options(cas), echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const TlsClientOptions as_y{ca_x_.cert_file, peer_y_.cert_file, peer_y_.key_file};
  auto ok =
      http_call(url(*server), "POST", "/v1/federation/reserve", "{}", "", 5000, "test", &as_y);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  const auto body = boost::json::parse(ok->body);
  EXPECT_EQ(body.at("kind").as_int64(), static_cast<int>(Identity::Kind::kPeer));
  EXPECT_EQ(body.at("domain").as_string(), "y");
  // The CA its chain was verified up to (federation routes pin it per peer domain).
  EXPECT_EQ(body.at("issuer_sha256").as_string(), certificate_sha256(ca_y_.cert.get()));
  EXPECT_NE(std::string(body.at("name").as_string()).find("CN=agent-y"), std::string::npos);
  EXPECT_FALSE(body.at("may_admin").as_bool());
  // A header of its own does not make a peer anonymous on an agent without tokens.
  ok = http_call(url(*server), "GET", "/v1/reservations", "", "made-up-token-0123456789", 5000,
                 "test", &as_y);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(boost::json::parse(ok->body).at("kind").as_int64(),
            static_cast<int>(Identity::Kind::kPeer));
  // Without a certificate (not required) the same server sees an anonymous client.
  const TlsClientOptions plain{ca_x_.cert_file, "", ""};
  ok = http_call(url(*server), "GET", "/healthz", "", "", 5000, "test", &plain);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(boost::json::parse(ok->body).at("kind").as_int64(),
            static_cast<int>(Identity::Kind::kAnonymous));
}

TEST_F(TlsTest, TheCommonNameNamesTheDomainWhenThereIsNoDetwanUri) {
  IdentityEcho echo;
  const Issued cn_only = pki_->leaf("cn-only", "w", ca_y_, "DNS:agent-w.example");
  auto server = HttpServer::start(options(ca_y_.cert_file), echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const TlsClientOptions as_w{ca_x_.cert_file, cn_only.cert_file, cn_only.key_file};
  auto ok = http_call(url(*server), "GET", "/healthz", "", "", 5000, "test", &as_w);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(boost::json::parse(ok->body).at("domain").as_string(), "w");
}

TEST_F(TlsTest, AClientCertificateFromAnUnknownCaFailsTheHandshake) {
  IdentityEcho echo;
  auto server = HttpServer::start(options(ca_y_.cert_file), echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  // The rogue certificate claims domain y but its CA is not domain y's.
  const TlsClientOptions rogue{ca_x_.cert_file, rogue_.cert_file, rogue_.key_file};
  auto refused = http_call(url(*server), "GET", "/healthz", "", "", 5000, "test", &rogue);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(echo.seen.empty());
  EXPECT_EQ(settled_count([&] { return (*server)->counters().refused_cert; }, 1), 1u);
}

TEST_F(TlsTest, AClientWithoutCertificateIsRefusedWhenOneIsRequired) {
  IdentityEcho echo;
  auto server = HttpServer::start(options(ca_y_.cert_file, true), echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const TlsClientOptions none{ca_x_.cert_file, "", ""};
  auto refused = http_call(url(*server), "GET", "/healthz", "", "", 5000, "test", &none);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(echo.seen.empty());
  EXPECT_EQ(settled_count([&] { return (*server)->counters().refused_cert; }, 1), 1u);
  // With domain y's certificate it passes.
  const TlsClientOptions as_y{ca_x_.cert_file, peer_y_.cert_file, peer_y_.key_file};
  auto ok = http_call(url(*server), "GET", "/healthz", "", "", 5000, "test", &as_y);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
}

// An aggregator's calls to a peer (federation): kept-alive connections, reused with the peer's
// identity on every request; one the server closed while idle is replaced without the caller
// seeing it; a wrong CA fails as http_call does.
TEST_F(TlsTest, KeptAliveConnectionsAreReusedAndReplacedOnceTheServerClosedThem) {
  IdentityEcho echo;
  auto o = options(ca_y_.cert_file);
  o.request_timeout_ns = 300'000'000;  // idle connections closed by the server after 300 ms
  auto server = HttpServer::start(o, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const TlsClientOptions as_y{ca_x_.cert_file, peer_y_.cert_file, peer_y_.key_file};
  auto pool = client::HttpConnectionPool::create(url(*server), &as_y, "test");
  ASSERT_TRUE(pool.has_value()) << pool.error().message;
  for (int i = 0; i < 5; ++i) {
    auto got = (*pool)->call("GET", "/healthz", "", "", 5000);
    ASSERT_TRUE(got.has_value()) << got.error().message;
    EXPECT_EQ(got->status, 200);
    EXPECT_EQ(boost::json::parse(got->body).at("domain").as_string(), "y");
  }
  EXPECT_EQ((*pool)->connections_opened(), 1u);  // one handshake for five calls
  // Concurrent calls take separate connections; every one is answered.
  std::vector<std::thread> threads;
  std::atomic<int> answered{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      auto got = (*pool)->call("POST", "/v1/reservations", "{}", "", 5000);
      if (got && got->status == 200) ++answered;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(answered.load(), 4);
  EXPECT_LE((*pool)->connections_opened(), 5u);
  const uint64_t before = (*pool)->connections_opened();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // the server closed them
  auto again = (*pool)->call("GET", "/healthz", "", "", 5000);
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(again->status, 200);
  EXPECT_EQ((*pool)->connections_opened(), before + 1);
  // A pool that does not trust the server's CA: refused as http_call is, naming the cause.
  const TlsClientOptions wrong{ca_y_.cert_file, peer_y_.cert_file, peer_y_.key_file};
  auto distrustful = client::HttpConnectionPool::create(url(*server), &wrong, "test");
  ASSERT_TRUE(distrustful.has_value());
  auto refused = (*distrustful)->call("GET", "/healthz", "", "", 5000);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("certificate verify failed"), std::string::npos)
      << refused.error().message;
}

TEST_F(TlsTest, AClientThatSaysNothingIsClosedAtTheRequestTimeout) {
  IdentityEcho echo;
  auto o = options();
  o.request_timeout_ns = 200'000'000;
  auto server = HttpServer::start(o, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), (*server)->local_endpoint().port});
  char byte = 0;
  boost::system::error_code ec;
  const size_t got = socket.read_some(boost::asio::buffer(&byte, 1), ec);  // blocks until closed
  EXPECT_EQ(got, 0u);
  EXPECT_TRUE(ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset)
      << ec.message();
  // The timer closes the socket before the handshake's handler counts it: wait for the count.
  for (int i = 0; i < 500 && (*server)->counters().refused_tls == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ((*server)->counters().refused_tls, 1u);
  EXPECT_TRUE(echo.seen.empty());
}

TEST_F(TlsTest, ConfigurationErrorsNameTheFile) {
  IdentityEcho echo;
  auto o = options();
  o.tls.key_file = peer_y_.key_file;  // not the certificate's key
  auto refused = HttpServer::start(o, echo.handler());
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find(peer_y_.key_file), std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(check_tls_options(o.tls).has_value());
  // A key file others may read is refused like a tokens file.
  o = options();
  std::filesystem::permissions(server_.key_file, std::filesystem::perms(0644));
  refused = HttpServer::start(o, echo.handler());
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("mode 0644"), std::string::npos)
      << refused.error().message;
  std::filesystem::permissions(server_.key_file, std::filesystem::perms(0600));
  EXPECT_TRUE(check_tls_options(o.tls).has_value());
  // Client CAs without a certificate, and a missing certificate file.
  o = options(ca_y_.cert_file, true);
  o.tls.cert_file.clear();
  EXPECT_FALSE(HttpServer::start(o, echo.handler()).has_value());
  o = options();
  o.tls.cert_file = dir_ + "/absent.crt";
  refused = HttpServer::start(o, echo.handler());
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("absent.crt"), std::string::npos)
      << refused.error().message;
}

TEST_F(TlsTest, ScopedTokensGiveTheIdentityTheirTenantVerbsAndSites) {
  const std::string tokens =
      write_file("tokens",
                 "read read-token-0123456789\n"
                 "token=team-token-0123456789 tenant=job-team verbs=read,reserve sites=a,b "
                 "name=jobs\n"
                 "verbs=admin name=ops tenant=* token=admin-token-0123456789\n");
  IdentityEcho echo;
  auto o = options();
  o.tokens_file = tokens;
  auto server = HttpServer::start(o, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const TlsClientOptions tls{ca_x_.cert_file, "", ""};
  auto team = http_call(url(*server), "POST", "/v1/reservations", "{}", "team-token-0123456789",
                        5000, "test", &tls);
  ASSERT_TRUE(team.has_value()) << team.error().message;
  ASSERT_EQ(team->status, 200) << team->body;
  auto admin = http_call(url(*server), "DELETE", "/v1/pools/p", "", "admin-token-0123456789", 5000,
                         "test", &tls);
  ASSERT_TRUE(admin.has_value());
  ASSERT_EQ(admin->status, 200) << admin->body;
  auto reader = http_call(url(*server), "POST", "/v1/reservations", "{}", "read-token-0123456789",
                          5000, "test", &tls);
  ASSERT_TRUE(reader.has_value());
  EXPECT_EQ(reader->status, 403);
  auto nobody = http_call(url(*server), "GET", "/v1/reservations", "", "", 5000, "test", &tls);
  ASSERT_TRUE(nobody.has_value());
  EXPECT_EQ(nobody->status, 401);
  ASSERT_EQ(echo.seen.size(), 2u);
  const Identity& t = echo.seen[0];
  EXPECT_EQ(t.kind, Identity::Kind::kToken);
  EXPECT_EQ(t.name, "jobs");
  EXPECT_EQ(t.tenant, "job-team");
  EXPECT_TRUE(t.may_read && t.may_reserve);
  EXPECT_FALSE(t.may_admin);
  EXPECT_EQ(t.sites, (std::vector<std::string>{"a", "b"}));
  const Identity& a = echo.seen[1];
  EXPECT_EQ(a.name, "ops");
  EXPECT_EQ(a.tenant, "");
  EXPECT_TRUE(a.may_admin);
  EXPECT_TRUE(a.sites.empty());
}

TEST_F(TlsTest, ATokenDecidesBeforeACertificateAndAWrongOneIsRefused) {
  IdentityEcho echo;
  auto o = options(ca_y_.cert_file);
  o.tokens_file = write_file(
      "tokens", "token=team-token-0123456789 tenant=job-team verbs=read,reserve name=jobs\n");
  auto server = HttpServer::start(o, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const TlsClientOptions as_y{ca_x_.cert_file, peer_y_.cert_file, peer_y_.key_file};
  auto peer = http_call(url(*server), "GET", "/v1/policy", "", "", 5000, "test", &as_y);
  ASSERT_TRUE(peer.has_value()) << peer.error().message;
  EXPECT_EQ(boost::json::parse(peer->body).at("domain").as_string(), "y");
  auto token = http_call(url(*server), "GET", "/v1/reservations", "", "team-token-0123456789", 5000,
                         "test", &as_y);
  ASSERT_TRUE(token.has_value()) << token.error().message;
  EXPECT_EQ(boost::json::parse(token->body).at("tenant").as_string(), "job-team");
  auto wrong = http_call(url(*server), "GET", "/v1/reservations", "", "made-up-token-0123456789",
                         5000, "test", &as_y);
  ASSERT_TRUE(wrong.has_value()) << wrong.error().message;
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(echo.seen.size(), 2u);
}

TEST_F(TlsTest, ScopedTokenLinesWithErrorsNameTheLine) {
  auto expect_line = [&](const std::string& name, const std::string& text, int line,
                         const std::string& what) {
    const std::string path = write_file(name, text);
    const auto refused = load_tokens(path);
    ASSERT_FALSE(refused.has_value()) << name;
    EXPECT_NE(refused.error().message.find(path + ":" + std::to_string(line) + ":"),
              std::string::npos)
        << refused.error().message;
    EXPECT_NE(refused.error().message.find(what), std::string::npos) << refused.error().message;
  };
  const std::string ok = "token=good-token-0123456789 tenant=t verbs=read\n";
  expect_line("verb", ok + "token=x-token-0123456789ab tenant=t verbs=read,fly\n", 2, "fly");
  expect_line("star",
              ok + "token=y-token-0123456789ab tenant=u verbs=read\n" +
                  "token=x-token-0123456789ab tenant=* verbs=read\n",
              3, "admin");
  expect_line("short", "token=short tenant=t verbs=read\n", 1, "16");
  expect_line("nokey", "token=x-token-0123456789ab verbs=read\n", 1, "tenant=");
  expect_line("unknown", "token=x-token-0123456789ab tenant=t verbs=read colour=red\n", 1,
              "colour");
  expect_line("tenant", "token=x-token-0123456789ab tenant=a/b verbs=read\n", 1, "a/b");
  expect_line("twice", ok + "read good-token-0123456789\n", 2, "the same token as line 1");
  auto loaded = load_tokens(write_file("mixed", "write write-token-0123456789\n" + ok));
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  EXPECT_TRUE((*loaded)[0].may_admin);
  EXPECT_EQ((*loaded)[0].name, "line 1");
  EXPECT_FALSE((*loaded)[1].may_reserve);
  EXPECT_EQ((*loaded)[1].tenant, "t");
}

}  // namespace
}  // namespace detwan::control::api
