// Run-time tunnel changes at the configuration level: request items read by the file's tunnel
// parser from JSON, the candidate checked by the file's validator, every refusal naming the
// request item and the field; the admin-socket keys of the gateway section and the tunnel owner.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dataplane/gw/config.h"
#include "tests/dataplane/gw/config_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using ::testing::HasSubstr;
using testing::kBase;
using testing::load_error;
using testing::load_ok;
using testing::with_line;

// kBase: tunnels 7 (site-b on wan1, slots 0-11, 10.20.2.0/24), 9 (site-b, slots 20-41,
// 10.20.3.0/24 UDP 5201-5210 and 9000), 11 (site-c on wan2, service ports).
class ConfigRuntime : public ::testing::Test {
 protected:
  const GatewayConfig base_ = load_ok(std::string(kBase));

  static TunnelConfig item(const std::string& json, const std::string& label = "add[0]") {
    auto parsed = parse_tunnel_item(json, label);
    EXPECT_TRUE(parsed) << parsed.error().message;
    return parsed ? *parsed : TunnelConfig{};
  }
  static std::string item_error(const std::string& json, const std::string& label) {
    auto parsed = parse_tunnel_item(json, label);
    if (parsed) {
      ADD_FAILURE() << "expected an error for " << json;
      return "";
    }
    EXPECT_EQ(parsed.error().code, common::ErrorCode::kConfig);
    return parsed.error().message;
  }
  std::string change_error(const TunnelChanges& changes) const {
    auto next = apply_tunnel_changes(base_, changes);
    if (next) {
      ADD_FAILURE() << "expected the change to be refused";
      return "";
    }
    EXPECT_EQ(next.error().code, common::ErrorCode::kConfig);
    return next.error().message;
  }
  static TunnelConfig b(uint32_t id, const std::string& slots) {
    return item(R"({"id":)" + std::to_string(id) +
                R"(,"peer":"site-b","auth":"none","rate":"10mbit","owner":"agent:x","slots":")" + slots +
                R"(","match":{"dst":["10.30.)" + std::to_string(id % 250) + R"(.0/24"]}})");
  }
};

TEST_F(ConfigRuntime, AJsonItemReadsLikeAYamlEntry) {
  const TunnelConfig t =
      item(R"({"id":1001,"peer":"site-b","auth":"none","owner":"agent:lab","rate":"10mbit","slots":[50,51,52],)"
           R"("burst":"64kb","over_rate":"best-effort","shaper_rate":"1gbit","queue":16,)"
           R"("max_wait":"1ms","missed_slot":"drop","bound":"4ms","late":"drop","max_hold":"1s",)"
           R"("playout_capacity":7,"dscp":10,"replay_window":128,)"
           R"("match":{"dst":["10.30.0.0/16"],"udp_ports":["5201-5210",9000]}})");
  const GatewayConfig yaml = load_ok(
      std::string(kBase) +
      "  - {id: 1001, peer: site-b, auth: none, owner: \"agent:lab\", rate: 10mbit,\n"
      "     slots: [50, 51, 52],\n"
      "     burst: 64kb, over_rate: best-effort, shaper_rate: 1gbit, queue: 16, max_wait: 1ms,\n"
      "     missed_slot: drop, bound: 4ms, late: drop, max_hold: 1s, playout_capacity: 7,\n"
      "     dscp: 10, replay_window: 128,\n"
      "     match: {dst: [10.30.0.0/16], udp_ports: [5201-5210, 9000]}}\n");
  ASSERT_EQ(yaml.tunnels.size(), 4u);
  EXPECT_EQ(t, yaml.tunnels.back());
  EXPECT_EQ(t.owner, "agent:lab");
  EXPECT_EQ(t.slots, (std::vector<uint32_t>{50, 51, 52}));
}

TEST_F(ConfigRuntime, MalformedItemsNameTheItemAndTheField) {
  EXPECT_EQ(item_error(R"({"id":1001,"peer":"site-b","auth":"none","rate":"10mbit","slots":"50","colour":1})",
                       "add[0] (tunnel 1001)"),
            "add[0] (tunnel 1001): field 'colour': unknown key 'colour' (allowed: id, peer, "
            "owner, rate, slots, burst, over_rate, shaper_rate, queue, max_wait, missed_slot, "
            "bound, late, max_hold, playout_capacity, dscp, replay_window, match, foreign_source, "
            "service, protection, auth)");
  EXPECT_THAT(item_error(R"({"id":1001,"peer":"site-b","auth":"none","rate":"4gbt","slots":"50"})",
                         "modify[2] (tunnel 1001)"),
              HasSubstr("modify[2] (tunnel 1001): field 'rate': "));
  EXPECT_EQ(item_error(R"({"id":1001,"rate":"10mbit","slots":"50"})", "add[0] (tunnel 1001)"),
            "add[0] (tunnel 1001): field 'peer': missing required field");
  EXPECT_THAT(item_error(R"({"id":0,"peer":"site-b","auth":"none","rate":"10mbit","slots":"50"})", "add[0]"),
              HasSubstr("add[0]: field 'id': expected an integer in [1, 4294967295], got '0'"));
  EXPECT_THAT(item_error(R"({"id":1001,"peer":"site-b","auth":"none","rate":"10mbit","slots":"50",)"
                         R"("owner":")" +
                             std::string(65, 'o') + R"("})",
                         "add[0] (tunnel 1001)"),
              HasSubstr("add[0] (tunnel 1001): field 'owner': 65 bytes: an owner is at most 64"));
  EXPECT_THAT(item_error(R"([1,2])", "add[3]"), HasSubstr("add[3]: expected a tunnel as a JSON"));
  EXPECT_THAT(item_error(R"({"id":1001,"peer":"site-b","auth":"none","rate":"10mbit","slots":{"a":1}})",
                         "add[0] (tunnel 1001)"),
              HasSubstr("add[0] (tunnel 1001): field 'slots': "));
}

TEST_F(ConfigRuntime, AddModifyRemoveKeepTheOrderAndTheRest) {
  TunnelChanges changes;
  changes.add = {b(1001, "50-52"), b(1002, "53-55")};
  TunnelConfig seven = base_.tunnels[0];
  seven.rate_bps = 50'000'000;
  seven.slots = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  changes.modify = {seven};
  changes.remove = {9};
  auto next = apply_tunnel_changes(base_, changes);
  ASSERT_TRUE(next) << next.error().message;
  ASSERT_EQ(next->tunnels.size(), 4u);
  EXPECT_EQ(next->tunnels[0], seven);
  EXPECT_EQ(next->tunnels[1], base_.tunnels[2]);
  EXPECT_EQ(next->tunnels[2].id, 1001u);
  EXPECT_EQ(next->tunnels[3].id, 1002u);
  GatewayConfig rest = *next;
  rest.tunnels = base_.tunnels;
  EXPECT_EQ(rest, base_);  // ports, peers and the rest unchanged
  // The result is a valid file.
  EXPECT_EQ(load_ok(describe(*next)).tunnels, next->tunnels);
}

TEST_F(ConfigRuntime, RefusalsNameTheRequestItemAndTheField) {
  TunnelChanges c;
  c.add = {b(1001, "50"), b(1001, "52")};
  EXPECT_EQ(change_error(c),
            "add[1] (tunnel 1001): field 'id': tunnel 1001 appears twice in this request (also "
            "add[0]); an id may appear once");
  c = {};
  c.modify = {base_.tunnels[0]};
  c.remove = {7};
  EXPECT_EQ(change_error(c),
            "remove[0]: field 'id': tunnel 7 appears twice in this request (also modify[0]); an "
            "id may appear once");
  c = {};
  c.add = {b(7, "50")};
  EXPECT_EQ(change_error(c),
            "add[0] (tunnel 7): field 'id': tunnel 7 exists already (modify changes it, remove "
            "deletes it)");
  c = {};
  c.modify = {b(55, "50")};
  EXPECT_EQ(change_error(c),
            "modify[0] (tunnel 55): field 'id': no tunnel 55 to modify (tunnels: "
            "7, 9, 11)");
  c = {};
  c.remove = {9, 56};
  EXPECT_EQ(change_error(c), "remove[1]: no tunnel 56 to remove (tunnels: 7, 9, 11)");
  c = {};
  c.add = {b(1001, "120")};
  EXPECT_EQ(change_error(c),
            "add[0] (tunnel 1001): field 'slots': slot 120 out of range [0, 100) of WAN port "
            "'wan1'");
  c = {};
  c.add = {b(1001, "50-52"), b(1002, "10-12")};
  EXPECT_EQ(change_error(c),
            "add[1] (tunnel 1002): field 'slots': slot 10 of WAN port 'wan1' is claimed by two "
            "tunnels: tunnel 7 (tunnels[0]) and tunnel 1002 (add[1])");
  // A modified tunnel that collides with one the request does not touch: still the item.
  c = {};
  TunnelConfig seven = base_.tunnels[0];
  seven.slots.push_back(20);
  c.modify = {seven};
  EXPECT_EQ(change_error(c),
            "modify[0] (tunnel 7): field 'slots': slot 20 of WAN port 'wan1' is claimed by two "
            "tunnels: tunnel 9 (tunnels[1]) and tunnel 7 (modify[0])");
  c = {};
  TunnelConfig big = b(1001, "50-99");
  big.rate_bps = 800'000'000;
  c.add = {big};
  EXPECT_THAT(change_error(c),
              HasSubstr("add[0] (tunnel 1001): field 'rate': the reserved rates on WAN port "
                        "'wan1' add up to 1.1gbit (tunnels 7, 9, 1001), above its line rate"));
  c = {};
  TunnelConfig overlap = b(1001, "50-52");
  overlap.dst_prefixes = {*parse_prefix("10.20.2.128/25")};
  c.add = {overlap};
  EXPECT_THAT(change_error(c),
              HasSubstr("add[0] (tunnel 1001): field 'match.dst[0]': 10.20.2.128/25 of tunnel "
                        "1001 overlaps 10.20.2.0/24 of tunnel 7 (tunnels[0].match.dst[0])"));
  c = {};
  TunnelConfig early = b(1001, "50-52");
  early.bound_ns = 1'000'000;  // below site-b's min_path_delay 2ms
  c.add = {early};
  EXPECT_THAT(change_error(c), HasSubstr("add[0] (tunnel 1001): field 'bound': bound 1ms is "
                                         "below the path's propagation delay 2ms"));
}

TEST_F(ConfigRuntime, ServicePortsAndSizedStateCannotChange) {
  TunnelChanges c;
  TunnelConfig service = b(1001, "50");
  service.service_deliver = *parse_endpoint("127.0.0.1:7000");
  c.add = {service};
  EXPECT_EQ(change_error(c),
            "add[0] (tunnel 1001): field 'service': service ports are set in "
            "the configuration file only");
  const auto refused = [&](TunnelConfig t) {
    TunnelChanges m;
    m.modify = {std::move(t)};
    return change_error(m);
  };
  TunnelConfig t = base_.tunnels[0];
  t.peer = "site-c";
  EXPECT_EQ(refused(t),
            "modify[0] (tunnel 7): field 'peer': cannot change at run time ('site-b' -> "
            "'site-c'); remove the tunnel and add a new one");
  t = base_.tunnels[0];
  t.replay_window_bits = 128;
  EXPECT_THAT(refused(t), HasSubstr("modify[0] (tunnel 7): field 'replay_window': cannot change "
                                    "at run time (4096 -> 128)"));
  t = base_.tunnels[0];
  t.playout_capacity_frames = 8;
  EXPECT_THAT(refused(t), HasSubstr("modify[0] (tunnel 7): field 'playout_capacity': cannot "
                                    "change at run time (4096 -> 8)"));
  t = base_.tunnels[2];
  t.service_listen.reset();
  EXPECT_THAT(refused(t), HasSubstr("modify[0] (tunnel 11): field 'service': service ports are "
                                    "set in the configuration file only"));
  // The same service is no change: a modify that repeats it is fine.
  t = base_.tunnels[2];
  t.dscp = 12;
  TunnelChanges same;
  same.modify = {t};
  EXPECT_TRUE(apply_tunnel_changes(base_, same));
}

// A reload: the file's tunnels against the running ones (the file's and the run-time ones).
TEST_F(ConfigRuntime, ReloadChangesOnlyTheFilesTunnels) {
  auto running = apply_tunnel_changes(base_, TunnelChanges{{b(1001, "60-63")}, {}, {}});
  ASSERT_TRUE(running) << running.error().message;
  const std::vector<uint32_t> file_ids = {7, 9, 11};
  GatewayConfig file = base_;
  // Unchanged file: nothing to do; the run-time tunnel 1001 is not the file's to remove.
  auto none = reload_changes(*running, file_ids, file);
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->add.empty() && none->modify.empty() && none->remove.empty());
  // Tunnel 7 changed, 9 gone, 1002 new.
  file.tunnels[0].rate_bps /= 2;
  file.tunnels.erase(file.tunnels.begin() + 1);
  file.tunnels.push_back(b(1002, "64-67"));
  auto changes = reload_changes(*running, file_ids, file);
  ASSERT_TRUE(changes) << changes.error().message;
  ASSERT_EQ(changes->modify.size(), 1u);
  EXPECT_EQ(changes->modify[0].id, 7u);
  ASSERT_EQ(changes->add.size(), 1u);
  EXPECT_EQ(changes->add[0].id, 1002u);
  EXPECT_EQ(changes->remove, std::vector<uint32_t>{9});
  // And they pass the run-time rules.
  EXPECT_TRUE(apply_tunnel_changes(*running, *changes));
  // The file naming the run-time tunnel's id takes it over (modified to the file's version).
  file = base_;
  file.tunnels.push_back(b(1001, "68-71"));
  changes = reload_changes(*running, file_ids, file);
  ASSERT_TRUE(changes);
  ASSERT_EQ(changes->modify.size(), 1u);
  EXPECT_EQ(changes->modify[0].id, 1001u);
}

TEST_F(ConfigRuntime, ReloadRefusesAnyOtherChangeNamingTheSection) {
  GatewayConfig file = base_;
  file.peers[0].endpoint.port += 1;
  auto refused = reload_changes(base_, {7, 9, 11}, file);
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("'peers' changed; a reload applies tunnel "
                                                 "changes only: restart the gateway"));
  file = base_;
  file.metrics.min_interval_ns *= 2;
  refused = reload_changes(base_, {7, 9, 11}, file);
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("'metrics' changed"));
  // What the command line may override is not compared.
  file = base_;
  file.control_socket = "@elsewhere";
  file.timing = TimingMode::kBusy;
  file.cpu = 3;
  EXPECT_TRUE(reload_changes(base_, {7, 9, 11}, file));
}

TEST(ConfigAdmin, AdminSocketModeAndUids) {
  const GatewayConfig config = load_ok(
      with_line(2,
                "  name: site-a\n  admin_socket: /run/detwan/admin.sock\n  admin_mode: 0660\n"
                "  admin_uids: [1000, 1001]"));
  EXPECT_EQ(config.admin_socket, "/run/detwan/admin.sock");
  EXPECT_EQ(config.admin_mode, 0660u);
  EXPECT_EQ(config.admin_uids, (std::vector<uint32_t>{1000, 1001}));
  auto again = load_gateway_config_string(describe(config), "gw.yaml");
  ASSERT_TRUE(again) << again.error().message;
  GatewayConfig copy = *again;
  copy.source = config.source;
  EXPECT_EQ(copy, config);
  const GatewayConfig defaults = load_ok(std::string(kBase));
  EXPECT_EQ(defaults.admin_socket, "");
  EXPECT_EQ(defaults.admin_mode, 0600u);

  EXPECT_THAT(load_error(with_line(2, "  name: a\n  admin_socket: \"@detwan-admin\"")),
              HasSubstr("gw.yaml:3:17: field 'gateway.admin_socket': admin socket "
                        "'@detwan-admin': must be a filesystem path starting with '/'"));
  EXPECT_THAT(load_error(with_line(2, "  name: a\n  admin_socket: run/admin.sock")),
              HasSubstr("must be an absolute path starting with '/'"));
  EXPECT_THAT(load_error(with_line(2, "  name: a\n  admin_mode: 600")),
              HasSubstr("field 'gateway.admin_mode': '600' is not an octal mode like 0600"));
  EXPECT_THAT(load_error(with_line(2, "  name: a\n  admin_mode: 0680")),
              HasSubstr("'0680' is not an octal mode"));
  EXPECT_THAT(load_error(with_line(2, "  name: a\n  admin_uids: [5, 5]")),
              HasSubstr("field 'gateway.admin_uids[1]': uid 5 is listed twice"));
  EXPECT_THAT(load_error(with_line(2,
                                   "  name: a\n  control_socket: /tmp/x.sock\n"
                                   "  admin_socket: /tmp/x.sock")),
              HasSubstr("field 'gateway.admin_socket': '/tmp/x.sock' is also the control socket"));
  EXPECT_FALSE(check_admin_socket(""));
  EXPECT_TRUE(check_admin_socket("/a"));
}

TEST(ConfigNoTunnels, AGatewayWithoutTunnelsIsValid) {
  std::string yaml(kBase);
  yaml = yaml.substr(0, yaml.find("tunnels:"));
  const GatewayConfig config = load_ok(yaml);
  EXPECT_TRUE(config.tunnels.empty());
  EXPECT_EQ(load_ok(describe(config)).tunnels.size(), 0u);
  EXPECT_TRUE(load_ok(yaml + "tunnels: []\n").tunnels.empty());
}

}  // namespace
}  // namespace detwan::dataplane::gw
