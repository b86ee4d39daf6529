#pragma once
// Topologies built in code for the control/ unit tests (no YAML): sites with or without a
// gateway, transit nodes and links; every link end at a gateway site gets a port, and every
// gateway a peer to every other gateway through each of its ports. build() runs
// model::finish() and fails the calling test if it refuses.
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "control/model/topology.h"

namespace detwan::control::testing {

class TopologyBuilder {
 public:
  explicit TopologyBuilder(std::string domain = "test") { topology_.domain = std::move(domain); }

  // A site (node of the same name); with a gateway "gw-<name>".
  TopologyBuilder& site(const std::string& name, bool with_gateway = true,
                        int64_t playout_error_ns = 100'000, int64_t processing_delay_ns = 50'000) {
    model::Topology& t = topology_;
    t.nodes.push_back(model::Node{name, model::kNone, {}});
    model::Site site;
    site.name = name;
    if (with_gateway) {
      site.gateway = static_cast<uint32_t>(t.gateways.size());
      model::Gateway gateway;
      gateway.name = "gw-" + name;
      gateway.site = static_cast<uint32_t>(t.sites.size());
      gateway.admin_socket = "/run/detwan/gw-" + name + ".sock";
      gateway.playout_error_ns = playout_error_ns;
      gateway.processing_delay_ns = processing_delay_ns;
      t.gateways.push_back(std::move(gateway));
    }
    t.sites.push_back(std::move(site));
    return *this;
  }

  TopologyBuilder& transit(const std::string& name) {
    topology_.nodes.push_back(model::Node{name, model::kNone, {}});
    return *this;
  }

  // A link between two existing nodes with the parameters of `proto` (name and ends replaced).
  TopologyBuilder& link(const std::string& name, const std::string& a, const std::string& b,
                        model::Link proto = model::Link{}) {
    model::Link link = std::move(proto);
    if (link.capacity_bps == 0) link.capacity_bps = 1'000'000'000;
    link.name = name;
    link.ends[0] = node(a);
    link.ends[1] = node(b);
    topology_.links.push_back(std::move(link));
    return *this;
  }

  model::Topology build() {
    model::Topology t = topology_;
    for (uint32_t l = 0; l < t.links.size(); ++l) {
      for (const uint32_t end : t.links[l].ends) {
        for (uint32_t s = 0; s < t.sites.size(); ++s) {
          if (t.sites[s].name == t.nodes[end].name && t.sites[s].gateway != model::kNone) {
            t.gateways[t.sites[s].gateway].ports.push_back(
                model::GatewayPort{"p-" + t.links[l].name, l});
          }
        }
      }
    }
    for (uint32_t g = 0; g < t.gateways.size(); ++g) {
      for (const model::GatewayPort& port : std::vector(t.gateways[g].ports)) {
        for (uint32_t far = 0; far < t.gateways.size(); ++far) {
          if (far == g) continue;
          t.gateways[g].peers.push_back(
              model::GatewayPeer{t.gateways[far].name + "@" + port.name, port.name, far});
        }
      }
    }
    const auto ok = model::finish(t);
    EXPECT_TRUE(ok.has_value()) << (ok ? "" : ok.error().message);
    return t;
  }

 private:
  uint32_t node(const std::string& name) const {
    for (uint32_t i = 0; i < topology_.nodes.size(); ++i) {
      if (topology_.nodes[i].name == name) return i;
    }
    ADD_FAILURE() << "no node " << name;
    return model::kNone;
  }
  model::Topology topology_;
};

// A link with the given capacity and delay; other fields at their defaults.
inline model::Link link_with(uint64_t capacity_bps, int64_t delay_ns, int64_t jitter_ns = 0,
                             double loss = 0, double reservable = 0.9) {
  model::Link link;
  link.capacity_bps = capacity_bps;
  link.delay_ns = delay_ns;
  link.jitter_ns = jitter_ns;
  link.loss = loss;
  link.reservable = reservable;
  return link;
}

}  // namespace detwan::control::testing
