// The SPANK plugin's arguments, --detwan-rate values and site pairs (control/slurm/plugin_config.h).
#include "control/slurm/plugin_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

struct Parsed {
  int rc;
  detwan_config config;
  std::string err;
};

Parsed parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  Parsed p{};
  char err[DETWAN_ERR_MAX] = "";
  p.rc = detwan_config_parse(&p.config, static_cast<int>(argv.size()), argv.data(), err,
                             sizeof err);
  p.err = err;
  return p;
}

const std::vector<std::string> kGood = {
    "detwanctl=/usr/bin/detwanctl", "sites=site-a:a,site-b:b,site-c:b",
    "agents=a=http://10.99.1.1:7800,b=http://10.99.2.1:7800", "duration=2h", "timeout=20",
    "conflict_wait=3"};

TEST(SlurmPluginConfig, ParsesEveryArgument) {
  const Parsed p = parse(kGood);
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_STREQ(p.config.detwanctl, "/usr/bin/detwanctl");
  EXPECT_EQ(p.config.node_count, 3u);
  EXPECT_STREQ(detwan_site_of(&p.config, "site-c"), "b");
  EXPECT_EQ(detwan_site_of(&p.config, "site-d"), nullptr);
  EXPECT_STREQ(detwan_agent_for(&p.config, "b"), "http://10.99.2.1:7800");
  EXPECT_STREQ(p.config.duration, "2h");
  EXPECT_EQ(p.config.timeout_s, 20);
  EXPECT_EQ(p.config.conflict_wait_s, 3);
}

TEST(SlurmPluginConfig, DefaultsAndOneAgentForAll) {
  const Parsed p = parse({"detwanctl=/x/detwanctl", "sites=n1:a,n2:b", "agent=http://h:1"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_STREQ(p.config.duration, "24h");
  EXPECT_EQ(p.config.timeout_s, 30);
  EXPECT_EQ(p.config.conflict_wait_s, 10);
  EXPECT_STREQ(detwan_agent_for(&p.config, "a"), "http://h:1");
}

TEST(SlurmPluginConfig, HttpsAgentsAndTheirCa) {
  const Parsed p = parse({"detwanctl=/x/detwanctl", "sites=n1:a,n2:b", "agent=https://h:7443",
                          "agents=b=https://10.99.2.1:7443", "agent_ca=/etc/detwan/ca.pem"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_STREQ(p.config.agent_ca, "/etc/detwan/ca.pem");
  EXPECT_STREQ(detwan_agent_for(&p.config, "a"), "https://h:7443");
  EXPECT_STREQ(detwan_agent_for(&p.config, "b"), "https://10.99.2.1:7443");
  const Parsed relative =
      parse({"detwanctl=/x", "sites=n:a", "agent=https://h:1", "agent_ca=ca.pem"});
  EXPECT_EQ(relative.rc, -1);
  EXPECT_NE(std::string(relative.err).find("agent_ca=ca.pem: must be an absolute path"),
            std::string::npos)
      << relative.err;
  // Replica sets: URL|URL (one scheme), in agent= and per site in agents=.
  const Parsed replicas = parse({"detwanctl=/x", "sites=n1:a,n2:b",
                                 "agent=http://h1:1|http://h2:1|http://h3:1",
                                 "agents=b=http://b1:1|http://b2:1"});
  ASSERT_EQ(replicas.rc, 0) << replicas.err;
  EXPECT_STREQ(replicas.config.agent, "http://h1:1|http://h2:1|http://h3:1");
  EXPECT_STREQ(replicas.config.agents[0].url, "http://b1:1|http://b2:1");
  for (const char* bad : {"agent=http://h1:1|", "agent=http://h1:1|https://h2:1",
                          "agent=http://h1:1||http://h2:1", "agent=http://h1:1|ftp://h2:1"}) {
    const Parsed p = parse({"detwanctl=/x", "sites=n:a", bad});
    EXPECT_NE(p.rc, 0) << bad;
  }
  const Parsed ftp = parse({"detwanctl=/x", "sites=n:a", "agent=ftp://h:1"});
  EXPECT_EQ(ftp.rc, -1);
}

TEST(SlurmPluginConfig, ErrorsNameTheArgument) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"sites=n1:a", "agent=http://h:1"}, "detwanctl=PATH is required"},
      {{"detwanctl=/x", "agent=http://h:1"}, "sites=NODE:SITE"},
      {{"detwanctl=relative", "sites=n:a", "agent=http://h:1"}, "absolute path"},
      {{"detwanctl=/x", "sites=n1", "agent=http://h:1"}, "'n1' is not NODE:SITE"},
      {{"detwanctl=/x", "sites=n1:a,n1:b", "agent=http://h:1"}, "node 'n1' is named twice"},
      {{"detwanctl=/x", "sites=n1:a b", "agent=http://h:1"}, "[A-Za-z0-9._-]{1,64}"},
      {{"detwanctl=/x", "sites=n1:a"}, "site 'a' has no agent"},
      {{"detwanctl=/x", "sites=n1:a", "agents=a=ftp://h"}, "must start with http(s)://"},
      {{"detwanctl=/x", "sites=n1:a", "agent=http://h:1", "duration=10x"}, "duration=10x"},
      {{"detwanctl=/x", "sites=n1:a", "agent=http://h:1", "timeout=0"}, "timeout=0"},
      {{"detwanctl=/x", "sites=n1:a", "agent=http://h:1", "conflict_wait=-1"}, "conflict_wait=-1"},
      {{"detwanctl=/x", "sites=n1:a", "agent=http://h:1", "rate=1"}, "unknown argument 'rate'"},
      {{"detwanctl=/x", "sites=n1:a", "agent=http://h:1", "oops"}, "expected KEY=VALUE"},
  };
  for (const auto& c : cases) {
    const Parsed p = parse(c.args);
    EXPECT_EQ(p.rc, -1) << c.expect;
    EXPECT_NE(p.err.find(c.expect), std::string::npos) << p.err;
  }
}

TEST(SlurmPluginConfig, RatesInBitsPerSecond) {
  const std::vector<std::pair<std::string, uint64_t>> good = {
      {"50mbit", 50'000'000},   {"1.5gbit", 1'500'000'000}, {"800kbit", 800'000},
      {"2000000bit", 2'000'000}, {"10Mbit", 10'000'000},   {"1tbit", 1'000'000'000'000},
      {"0.25mbps", 250'000},    {"1kbits", 1'000}};
  for (const auto& [text, want] : good) {
    uint64_t bps = 0;
    char err[DETWAN_ERR_MAX] = "";
    EXPECT_EQ(detwan_parse_rate(text.c_str(), &bps, err, sizeof err), 0) << text << ": " << err;
    EXPECT_EQ(bps, want) << text;
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "expected a rate"},        {"fast", "expected a rate"},
      {"50", "unknown rate unit ''"}, {"50mb", "unknown rate unit 'b'"},
      {"5.mbit", "digits after '.'"}, {"999bit", "at least 1kbit"},
      {"-5mbit", "expected a rate"},  {"99999999999999999999tbit", "too large"}};
  for (const auto& [text, want] : bad) {
    uint64_t bps = 0;
    char err[DETWAN_ERR_MAX] = "";
    EXPECT_EQ(detwan_parse_rate(text.c_str(), &bps, err, sizeof err), -1) << text;
    EXPECT_NE(std::string(err).find(want), std::string::npos) << text << ": " << err;
  }
}

TEST(SlurmPluginConfig, JobSitesAreDistinctAndSorted) {
  const Parsed p = parse(kGood);
  ASSERT_EQ(p.rc, 0);
  const char* nodes[] = {"site-c", "site-a", "site-b"};
  char sites[DETWAN_MAX_SITES][DETWAN_NAME_MAX];
  char err[DETWAN_ERR_MAX] = "";
  ASSERT_EQ(detwan_job_sites(&p.config, nodes, 3, sites, DETWAN_MAX_SITES, err, sizeof err), 2);
  EXPECT_STREQ(sites[0], "a");
  EXPECT_STREQ(sites[1], "b");
  const char* unknown[] = {"site-a", "gpu7"};
  EXPECT_EQ(detwan_job_sites(&p.config, unknown, 2, sites, DETWAN_MAX_SITES, err, sizeof err), -1);
  EXPECT_NE(std::string(err).find("node 'gpu7' has no detwan site"), std::string::npos) << err;
}

TEST(SlurmPluginConfig, RequestIdNamesJobAndPair) {
  char id[128];
  detwan_request_id(id, sizeof id, 42, "a", "b");
  EXPECT_STREQ(id, "slurm-42-a-b");
}

}  // namespace
