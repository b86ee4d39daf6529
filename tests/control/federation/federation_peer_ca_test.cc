// A peer's certificate counts on the federation routes only when the CA listed for the domain it
// names issued it: agent.tls.client_ca trusts every peer's CA, and each CA can sign any name, so
// without the pin owner x could speak to w as owner z (docs/trust.md "Peers").
#include <openssl/pem.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "control/api/federation_routes.h"
#include "tests/control/api/test_pki.h"
#include "tests/control/federation/federation_harness.h"

namespace detwan::control::testing {
namespace {

std::string sha256_of(const Issued& cert) { return api::certificate_sha256(cert.cert.get()); }

struct PeerCaTest : ::testing::Test {
  TempDir dir;
  TestPki pki{dir.path()};
  Issued ca_x = pki.ca("ca-x");
  Issued ca_z = pki.ca("ca-z");
  common::VirtualClock realtime{kStartNs};
  common::VirtualClock monotonic{1'000 * kSecond};
  FakeGateways gateways;
  std::unique_ptr<agent::Agent> agent;
  api::Handler handler;

  common::Result<std::shared_ptr<api::FederationRoutes>> open(const std::string& z_ca) {
    const std::string peers = fmt::format(
        "    - {{domain: x, url: https://127.0.0.1:1, ca: {}}}\n"
        "    - {{domain: z, url: https://127.0.0.1:2, ca: {}}}\n",
        ca_x.cert_file, z_ca);
    auto topology = model::load_topology_string(topology_of("w", dir.path() + "/w.db", peers),
                                                "w.yaml");
    EXPECT_TRUE(topology.has_value()) << topology.error().message;
    agent::AgentOptions options;
    options.realtime = &realtime;
    options.monotonic = &monotonic;
    options.gateway_client = &gateways;
    options.start_threads = false;
    auto opened = agent::Agent::open(std::move(*topology), options);
    EXPECT_TRUE(opened.has_value()) << opened.error().message;
    agent = std::move(*opened);
    auto routes = api::make_federation_routes(*agent, nullptr);
    if (routes) handler = api::make_handler(*agent, "", *routes);
    return routes;
  }

  // GET /v1/federation/view as a verified certificate naming `domain`, issued by `issuer`.
  int view_as(const std::string& domain, const std::string& issuer_sha256, std::string* body) {
    api::HttpRequest r;
    r.method = "GET";
    r.target = r.path = "/v1/federation/view";
    r.client = "127.0.0.1:5555";
    r.identity.kind = api::Identity::Kind::kPeer;
    r.identity.name = "/CN=" + domain;
    r.identity.domain = domain;
    r.identity.issuer_sha256 = issuer_sha256;
    r.identity.may_admin = false;
    int status = 0;
    handler(std::move(r), [&](api::HttpResponse response) {
      status = response.status;
      *body = response.body;
    });
    return status;
  }
};

TEST_F(PeerCaTest, ACertificateNamingZCountsOnlyWhenZsCaIssuedIt) {
  ASSERT_TRUE(open(ca_z.cert_file).has_value());
  std::string body;
  EXPECT_EQ(view_as("z", sha256_of(ca_z), &body), 200) << body;
  EXPECT_EQ(view_as("x", sha256_of(ca_x), &body), 200) << body;
  // x's CA signed a certificate that says "z": refused, naming what it claimed.
  EXPECT_EQ(view_as("z", sha256_of(ca_x), &body), 403) << body;
  EXPECT_NE(body.find("certificate for domain 'z'"), std::string::npos) << body;
  EXPECT_EQ(view_as("z", "", &body), 403) << body;
  // A domain that is no peer of w, whoever signed it.
  EXPECT_EQ(view_as("q", sha256_of(ca_z), &body), 403) << body;
}

TEST_F(PeerCaTest, ABundleAsAPeersCaPinsEachOfItsCertificates) {
  const std::string bundle = dir.path() + "/z-bundle.pem";
  {
    std::FILE* f = std::fopen(bundle.c_str(), "w");
    ASSERT_NE(f, nullptr);
    PEM_write_X509(f, ca_z.cert.get());
    Issued ca_z2 = pki.ca("ca-z2");
    PEM_write_X509(f, ca_z2.cert.get());
    std::fclose(f);
    ASSERT_TRUE(open(bundle).has_value());
    std::string body;
    EXPECT_EQ(view_as("z", sha256_of(ca_z), &body), 200) << body;
    EXPECT_EQ(view_as("z", sha256_of(ca_z2), &body), 200) << body;
    EXPECT_EQ(view_as("z", sha256_of(ca_x), &body), 403) << body;
  }
}

TEST_F(PeerCaTest, APeersCaThatIsNoCertificateStopsTheRoutesNamingTheFieldAndFile) {
  const std::string junk = dir.path() + "/junk.pem";
  std::FILE* f = std::fopen(junk.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("not a certificate\n", f);
  std::fclose(f);
  auto routes = open(junk);
  ASSERT_FALSE(routes.has_value());
  EXPECT_NE(routes.error().message.find("federation.peers[z].ca"), std::string::npos)
      << routes.error().message;
  EXPECT_NE(routes.error().message.find(junk), std::string::npos) << routes.error().message;
}

}  // namespace
}  // namespace detwan::control::testing
