// control/policy: the owner-policy checker (each cap at and beyond its boundary, each holder
// kind, the link share summed over overlapping holdings), its JSON views, and the topology
// loader's policy and agent.tls sections (inheritance, errors naming file:line and field).
#include "control/policy/policy.h"

#include <gtest/gtest.h>

#include "tests/control/topology_builder.h"

namespace detwan::control::policy {
namespace {

constexpr int64_t kHour = 3'600'000'000'000;
constexpr uint64_t kMbit = 1'000'000;

model::Policy sample_policy() {
  model::Policy p;
  p.defaults.max_rate_bps = 100 * kMbit;
  p.defaults.max_reservations = 3;
  p.defaults.max_window_ns = 24 * kHour;
  p.defaults.max_link_share = 0.5;
  model::PolicyLimits team = p.defaults;
  team.max_rate_bps = 20 * kMbit;
  p.tenants["team"] = team;
  model::PolicyLimits w = p.defaults;
  w.max_rate_bps = 50 * kMbit;
  w.max_link_share = 0.25;
  p.domains["w"] = w;
  return p;
}

class PolicyTest : public ::testing::Test {
 protected:
  // l1 and l2: 1 Gbit/s at 50 % reservable = 500 Mbit/s each.
  model::Topology topology =
      testing::TopologyBuilder()
          .site("a")
          .site("b")
          .transit("r")
          .link("l1", "a", "r", testing::link_with(1'000'000'000, 1, 0, 0, 0.5))
          .link("l2", "r", "b", testing::link_with(1'000'000'000, 1, 0, 0, 0.5))
          .build();
  model::Policy policy = sample_policy();

  static reservation::Spec spec(uint64_t rate_bps, int64_t window_ns = kHour) {
    reservation::Spec s;
    s.src = "a";
    s.dst = "b";
    s.min_bandwidth_bps = rate_bps;
    s.start_ns = 10 * kHour;
    s.end_ns = s.start_ns + window_ns;
    return s;
  }
  static Holding holding(const std::string& id, uint64_t rate_bps, int64_t start_ns, int64_t end_ns,
                         std::vector<std::string> links = {"l1", "l2"}) {
    return Holding{id, rate_bps, start_ns, end_ns, std::move(links)};
  }
  std::optional<PolicyRefusal> check(std::string_view tenant, std::string_view domain,
                                     const reservation::Spec& s,
                                     const std::vector<Holding>& holdings = {}) {
    return check_policy(policy, topology, tenant, domain, s, {"l1", "l2"}, holdings);
  }
};

TEST_F(PolicyTest, EachHolderKindGetsItsOwnCaps) {
  // The domain's operator: not capped at all.
  EXPECT_EQ(limits_for(policy, "", ""), nullptr);
  EXPECT_FALSE(check("", "", spec(400 * kMbit, 1000 * kHour)));
  // A tenant with an entry, one without (the default), a domain with one, one without.
  EXPECT_EQ(limits_for(policy, "team", ""), &policy.tenants.at("team"));
  EXPECT_EQ(limits_for(policy, "someone", ""), &policy.defaults);
  EXPECT_EQ(limits_for(policy, "", "w"), &policy.domains.at("w"));
  EXPECT_EQ(limits_for(policy, "", "v"), &policy.defaults);
  // A foreign domain's request is the domain's, whatever tenant it names.
  EXPECT_EQ(limits_for(policy, "team", "w"), &policy.domains.at("w"));
  EXPECT_TRUE(check("team", "", spec(21 * kMbit)));
  EXPECT_FALSE(check("someone", "", spec(21 * kMbit)));
  EXPECT_TRUE(check("", "w", spec(51 * kMbit)));
  EXPECT_FALSE(check("", "v", spec(51 * kMbit)));
  // No policy section: nothing is capped.
  EXPECT_FALSE(check_policy(model::Policy{}, topology, "team", "", spec(400 * kMbit, 1000 * kHour),
                            {"l1"}, {}));
}

TEST_F(PolicyTest, RateCapAtAndBeyondItsFigure) {
  EXPECT_FALSE(check("team", "", spec(20 * kMbit)));
  const auto refused = check("team", "", spec(20 * kMbit + 1));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->cause, kPolicyRate);
  EXPECT_EQ(refused->field, "min_bandwidth_bps");
  EXPECT_NE(refused->message.find("tenant 'team'"), std::string::npos) << refused->message;
  EXPECT_NE(refused->message.find("max_rate"), std::string::npos) << refused->message;
  EXPECT_NE(refused->message.find("20"), std::string::npos) << refused->message;
  const auto domain = check("", "w", spec(60 * kMbit));
  ASSERT_TRUE(domain);
  EXPECT_NE(domain->message.find("domain 'w'"), std::string::npos) << domain->message;
}

TEST_F(PolicyTest, WindowCapAtAndBeyondItsFigure) {
  EXPECT_FALSE(check("team", "", spec(kMbit, 24 * kHour)));
  const auto refused = check("team", "", spec(kMbit, 24 * kHour + 1));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->cause, kPolicyWindow);
  EXPECT_NE(refused->message.find("max_window"), std::string::npos) << refused->message;
}

TEST_F(PolicyTest, ReservationCountCapCountsWhatIsHeld) {
  const std::vector<Holding> two = {holding("r-1", kMbit, 0, 1), holding("r-2", kMbit, 0, 1)};
  EXPECT_FALSE(check("team", "", spec(kMbit), two));  // the third: at the cap
  std::vector<Holding> three = two;
  three.push_back(holding("r-3", kMbit, 0, 1));
  const auto refused = check("team", "", spec(kMbit), three);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->cause, kPolicyReservations);
  EXPECT_NE(refused->message.find("holds 3"), std::string::npos) << refused->message;
}

TEST_F(PolicyTest, LinkShareSumsOverlappingHoldingsOnTheSameLink) {
  // Domain w: 25 % of 500 Mbit/s = 125 Mbit/s per link; its rate cap is 50 Mbit/s each.
  const reservation::Spec s = spec(45 * kMbit);
  const std::vector<Holding> at_cap = {
      holding("r-1", 40 * kMbit, s.start_ns, s.end_ns),
      holding("r-2", 40 * kMbit, s.start_ns - kHour, s.start_ns + 1, {"l1"})};
  EXPECT_FALSE(check("", "w", s, at_cap));  // 45 + 40 + 40 = 125 on l1
  std::vector<Holding> beyond = at_cap;
  beyond[0].rate_bps += 1;
  const auto refused = check("", "w", s, beyond);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->cause, kPolicyLinkShare);
  EXPECT_NE(refused->message.find("link 'l1'"), std::string::npos) << refused->message;
  EXPECT_NE(refused->message.find("25%"), std::string::npos) << refused->message;
  // A holding that ends before the request starts, or on other links, does not count.
  std::vector<Holding> apart = beyond;
  apart[1].end_ns = s.start_ns;
  EXPECT_FALSE(check("", "w", s, apart));
  std::vector<Holding> elsewhere = beyond;
  elsewhere[1].links = {"l9"};
  EXPECT_FALSE(check("", "w", s, elsewhere));
  // Two paths of one request over the same link count twice.
  EXPECT_TRUE(check_policy(policy, topology, "", "w", spec(50 * kMbit), {"l1", "l1", "l1"}, {}));
}

TEST_F(PolicyTest, JsonShowsOnlyWhatTheViewMaySee) {
  const auto all = policy_json(policy, PolicyView{true, "", ""});
  EXPECT_EQ(all.at("tenants").as_object().size(), 1u);
  EXPECT_EQ(all.at("domains").as_object().size(), 1u);
  EXPECT_EQ(all.at("default").at("max_link_share").as_double(), 0.5);
  const auto team = policy_json(policy, PolicyView{false, "team", ""});
  EXPECT_EQ(team.at("tenants").at("team").at("max_rate_bps").to_number<uint64_t>(), 20 * kMbit);
  EXPECT_TRUE(team.at("domains").as_object().empty());
  const auto w = policy_json(policy, PolicyView{false, "", "w"});
  EXPECT_TRUE(w.at("tenants").as_object().empty());
  EXPECT_EQ(w.at("domains").at("w").at("max_window_ns").to_number<int64_t>(), 24 * kHour);
  EXPECT_TRUE(
      policy_json(model::Policy{}, PolicyView{true, "", ""}).at("default").as_object().empty());
}

constexpr const char* kTopology = R"(domain: x
agent:
  tokens_file: /etc/detwan/tokens
  tls: {cert: /etc/detwan/agent.crt, key: /etc/detwan/agent.key, client_ca: /etc/detwan/peers.pem,
        require_client_cert: true}
policy:
  default: {max_rate: 1gbit, max_link_share: 50%, max_window: 24h, max_reservations: 100}
  tenants:
    job-team: {max_rate: 200mbit, max_reservations: 10}
  domains:
    w: {max_rate: 500mbit, max_link_share: 25%}
sites:
  - {name: a}
  - {name: b}
links:
  - {name: ab, ends: [a, b], capacity: 1gbit, delay: 1ms}
)";

TEST(PolicyLoad, PolicyAndTlsSectionsLoadWithInheritance) {
  const auto t = model::load_topology_string(kTopology, "x.yaml");
  ASSERT_TRUE(t.has_value()) << t.error().message;
  EXPECT_EQ(t->agent.api.tls.cert, "/etc/detwan/agent.crt");
  EXPECT_EQ(t->agent.api.tls.key, "/etc/detwan/agent.key");
  EXPECT_EQ(t->agent.api.tls.client_ca, "/etc/detwan/peers.pem");
  EXPECT_TRUE(t->agent.api.tls.require_client_cert);
  const model::Policy& p = t->policy;
  EXPECT_EQ(*p.defaults.max_rate_bps, 1'000'000'000u);
  EXPECT_DOUBLE_EQ(*p.defaults.max_link_share, 0.5);
  EXPECT_EQ(*p.defaults.max_window_ns, 24 * kHour);
  EXPECT_EQ(*p.defaults.max_reservations, 100u);
  const model::PolicyLimits& team = p.tenants.at("job-team");
  EXPECT_EQ(*team.max_rate_bps, 200 * kMbit);
  EXPECT_EQ(*team.max_reservations, 10u);
  EXPECT_DOUBLE_EQ(*team.max_link_share, 0.5);  // from the default
  const model::PolicyLimits& w = p.domains.at("w");
  EXPECT_DOUBLE_EQ(*w.max_link_share, 0.25);
  EXPECT_EQ(*w.max_window_ns, 24 * kHour);
  // Without the sections: no TLS, no caps.
  std::string plain = kTopology;
  plain.erase(plain.find("  tls:"), plain.find("policy:") - plain.find("  tls:"));
  plain.erase(plain.find("policy:"), plain.find("sites:") - plain.find("policy:"));
  const auto bare = model::load_topology_string(plain, "x.yaml");
  ASSERT_TRUE(bare.has_value()) << bare.error().message;
  EXPECT_TRUE(bare->agent.api.tls.cert.empty());
  EXPECT_FALSE(bare->policy.defaults.max_rate_bps.has_value());
}

void expect_error(const std::string& from, const std::string& to, const std::string& field,
                  const std::string& what) {
  std::string yaml = kTopology;
  const size_t at = yaml.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  yaml.replace(at, from.size(), to);
  const auto refused = model::load_topology_string(yaml, "x.yaml");
  ASSERT_FALSE(refused.has_value()) << to;
  EXPECT_NE(refused.error().message.find("x.yaml:"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find(field), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find(what), std::string::npos) << refused.error().message;
}

TEST(PolicyLoad, ErrorsNameTheField) {
  expect_error("max_link_share: 25%", "max_link_share: 150%", "policy.domains.w.max_link_share",
               "100%");
  expect_error("max_reservations: 10}", "max_reservations: 10, colour: red}", "colour",
               "unknown key");
  expect_error("max_rate: 200mbit", "max_rate: 0mbit", "max_rate", "above 0");
  expect_error("job-team:", "job/team:", "job/team", "not a valid name");
  expect_error("policy:\n", "policy:\n  everyone: {}\n", "everyone", "unknown key");
  expect_error(", client_ca: /etc/detwan/peers.pem", "", "require_client_cert", "client_ca");
  expect_error("key: /etc/detwan/agent.key, ", "", "cert", "key");
  expect_error("tls: {", "tls: {colour: red, ", "colour", "unknown key");
}

}  // namespace
}  // namespace detwan::control::policy
