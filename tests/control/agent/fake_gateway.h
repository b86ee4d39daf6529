#pragma once
// A stand-in for detwan-gw's admin socket, for the agent's unit tests: it answers
// {"cmd":"tunnels"}, {"cmd":"apply",...} and (a small part of) {"cmd":"stats"} as docs/gateway.md
// "Control channel" describes
// (generation, boot_id, if_generation, all-or-nothing), per socket path, in memory. Faults:
// a gateway can be made unreachable, restarted (tunnels gone, new boot id), or told to refuse
// a tunnel id.
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/units.h"
#include "control/gateway/reconciler.h"
#include "control/reservation/tunnel_keys.h"

namespace detwan::control::testing {

class FakeGateways final : public gateway::GatewayClient {
 public:
  struct Gateway {
    uint64_t generation = 0;
    uint64_t boot = 1;
    bool reachable = true;
    std::set<uint32_t> refuse;    // tunnel ids it refuses to add
    std::set<uint32_t> time_out;  // an apply that adds only one of these gets no answer
    std::map<uint32_t, boost::json::object> tunnels;  // as {"cmd":"tunnels"} lists them
    uint64_t applies = 0;
    std::string public_key;  // the identity's public key it reports ("" = null: none)
    // {"cmd":"stats"}: every tunnel received this many on-time packets, with this WAN delay.
    uint64_t rx_packets = 0;
    int64_t wan_delay_ns = 5'000'000;
    uint64_t stats_requests = 0;
  };

  common::Result<std::string> request(const std::string& socket, const std::string& line) override {
    std::lock_guard lock(mutex_);
    Gateway& g = gateways_[socket];
    ++requests_;
    if (!g.reachable) {
      return common::make_error(common::ErrorCode::kUnavailable,
                                fmt::format("nothing listens on {}: Connection refused", socket));
    }
    const boost::json::object request = boost::json::parse(line).as_object();
    const std::string cmd(request.at("cmd").as_string());
    if (cmd == "tunnels") {
      boost::json::array list;
      for (const auto& [id, t] : g.tunnels) list.push_back(t);
      return boost::json::serialize(boost::json::object{
          {"gateway", socket},
          {"boot_id", fmt::format("{:016x}", g.boot)},
          {"generation", g.generation},
          {"tunnels", std::move(list)},
          {"public_key",
           g.public_key.empty() ? boost::json::value(nullptr) : boost::json::value(g.public_key)}});
    }
    if (cmd == "stats") {
      ++g.stats_requests;
      boost::json::array list;
      for (const auto& [id, t] : g.tunnels) {
        auto histogram = [&](int64_t v) {
          return boost::json::object{
              {"count", g.rx_packets}, {"min", v},       {"mean", v}, {"p50", v}, {"p90", v},
              {"p99", v + 1000},       {"max", v + 2000}};
        };
        boost::json::object on_time{{"received_packets", g.rx_packets},
                                    {"released_packets", g.rx_packets},
                                    {"late_packets", 0},
                                    {"dropped", boost::json::object{{"late", 0}}},
                                    {"wan_delay_ns", histogram(g.wan_delay_ns)},
                                    {"one_way_delay_ns", histogram(g.wan_delay_ns + 1'000'000)},
                                    {"lateness_ns", histogram(0)}};
        on_time["lateness_ns"].as_object()["count"] = 0;
        list.push_back(boost::json::object{
            {"id", id},
            {"owner", t.at("owner")},
            {"peer", t.at("peer")},
            {"port", "wan0"},
            {"rate_bps", t.at("rate_bps")},
            {"bound_ns", t.at("bound_ns")},
            {"tx", boost::json::object{{"sent_on_time_packets", g.rx_packets}}},
            {"rx",
             boost::json::object{{"on_time", std::move(on_time)},
                                 {"best_effort", boost::json::object{{"received_packets", 0}}}}}});
      }
      return boost::json::serialize(boost::json::object{{"tunnels", std::move(list)}});
    }
    if (cmd != "apply") return error(g, "unknown cmd");
    if (const auto* want = request.if_contains("if_generation")) {
      if (want->to_number<uint64_t>() != g.generation) {
        return error(g, fmt::format("generation is {}, the request expected {}", g.generation,
                                    want->to_number<uint64_t>()));
      }
    }
    if (request.at("add").as_array().size() == 1 && request.at("modify").as_array().empty() &&
        g.time_out.count(static_cast<uint32_t>(
            request.at("add").as_array()[0].as_object().at("id").to_number<uint64_t>())) != 0) {
      return common::make_error(common::ErrorCode::kTimeout,
                                fmt::format("no answer on {} within 2000 ms", socket));
    }
    auto next = g.tunnels;
    for (const auto& id : request.at("remove").as_array()) {
      if (next.erase(static_cast<uint32_t>(id.to_number<uint64_t>())) == 0) {
        return error(g, fmt::format("remove: no tunnel {}", id.to_number<uint64_t>()));
      }
    }
    for (const char* list : {"modify", "add"}) {
      for (const auto& item : request.at(list).as_array()) {
        const auto& t = item.as_object();
        const auto id = static_cast<uint32_t>(t.at("id").to_number<uint64_t>());
        const bool exists = next.count(id) != 0;
        if (std::string(list) == "add" && (exists || g.refuse.count(id) != 0)) {
          return error(g, fmt::format("add[0] (tunnel {}): refused by the fake", id));
        }
        if (std::string(list) == "modify" && !exists)
          return error(g, fmt::format("modify: no tunnel {}", id));
        next[id] = describe(t);
      }
    }
    g.tunnels = std::move(next);
    ++g.generation;
    ++g.applies;
    return boost::json::serialize(boost::json::object{{"ok", true}, {"generation", g.generation}});
  }

  // Test controls (thread-safe).
  template <typename F>
  auto with(const std::string& socket, F&& f) {
    std::lock_guard lock(mutex_);
    return f(gateways_[socket]);
  }
  void restart(const std::string& socket) {
    with(socket, [](Gateway& g) {
      g.tunnels.clear();
      g.generation = 0;
      ++g.boot;
      return 0;
    });
  }
  uint64_t requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  static common::Result<std::string> error(const Gateway& g, const std::string& message) {
    return boost::json::serialize(
        boost::json::object{{"error", message}, {"generation", g.generation}});
  }
  // An `apply` item (YAML vocabulary with units) -> the `tunnels` form (numbers with units in
  // names).
  static boost::json::object describe(const boost::json::object& t) {
    auto text = [&](const char* key) { return std::string(t.at(key).as_string()); };
    boost::json::object out{{"id", t.at("id")},
                            {"peer", t.at("peer")},
                            {"owner", t.at("owner")},
                            {"rate_bps", *common::parse_rate_bps(text("rate"))},
                            {"slots", t.at("slots")},
                            {"burst_bytes", *common::parse_size_bytes(text("burst"))},
                            {"bound_ns", *common::parse_duration_ns(text("bound"))},
                            {"max_hold_ns", *common::parse_duration_ns(text("max_hold"))},
                            {"dscp", t.at("dscp")},
                            {"match", t.at("match")}};
    if (const auto* protection = t.if_contains("protection")) out["protection"] = *protection;
    // Keys as detwan-gw shows them: by id and fingerprint, never the secret. A tunnel must say
    // "auth" (keys, or "none" by name) as detwan-gw requires; "none" shows as no "auth".
    const auto* auth = t.if_contains("auth");
    if (auth == nullptr) throw std::runtime_error("tunnel without 'auth' (detwan-gw refuses it)");
    if (auth->is_object()) {
      boost::json::array keys;
      // x25519 (key_exchange): keys by id and context, and the peer's public key, as detwan-gw
      // shows them (it adds the derived secret's fingerprint, which a fake cannot compute).
      const auto* exchange = auth->as_object().if_contains("key_exchange");
      for (const auto& key : auth->at("keys").as_array()) {
        keys.push_back(
            exchange != nullptr
                ? boost::json::object{{"id", key.at("id")}, {"context", key.at("context")}}
                : boost::json::object{{"id", key.at("id")},
                                      {"fingerprint", reservation::key_fingerprint(std::string(
                                                          key.at("secret").as_string()))}});
      }
      boost::json::object shown{{"cipher", auth->at("cipher")},
                                {"keys", std::move(keys)},
                                {"tx_key", auth->at("tx_key")}};
      if (exchange != nullptr) {
        shown["key_exchange"] = *exchange;
        shown["peer_public_key"] = auth->at("peer_public_key");
      }
      out["auth"] = std::move(shown);
    }
    return out;
  }

  std::mutex mutex_;
  std::map<std::string, Gateway> gateways_;
  uint64_t requests_ = 0;
};

}  // namespace detwan::control::testing
