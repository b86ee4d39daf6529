// libFuzzer target for the YAML and JSON configurations detwan reads: the gateway's
// configuration file (dataplane/gw/config.h, load_gateway_config_string), a run-time tunnel
// item the agent sends to a gateway (parse_tunnel_item, JSON) and the agent's topology file
// (control/model/topology.h, load_topology_string).
//
// The first input byte selects (0: gateway YAML, 1: tunnel item JSON, 2: topology YAML; others
// all three), the rest is the text. Invariants: nothing crashes or hangs; a refusal names the
// problem (with the source name for files); a gateway configuration that loads is described as
// YAML that loads again to the same configuration (without authenticated tunnels, whose secrets
// describe() never prints); a refused tunnel item names it.
//
// Built with libFuzzer by the fuzz build (tests/fuzz/meson.build, -Dfuzz=true) and with g++ as
// the corpus replay test fuzz_config_corpus_test.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "control/model/topology.h"
#include "dataplane/gw/config.h"


namespace detwan {
namespace {

// DETWAN_FUZZ_VERBOSE=1 prints what each parser said (to see what a seed reaches).
void report(const char* what, const std::string& error) {
  static const bool verbose = std::getenv("DETWAN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "config_fuzz: %s: %s\n", what, error.empty() ? "ok" : error.c_str());
}

void check_gateway(const std::string& yaml) {
  auto config = dataplane::gw::load_gateway_config_string(yaml, "fuzz.yaml");
  report("gateway", config ? "" : config.error().message);
  if (!config) {
    FUZZ_CHECK(config.error().message.find("fuzz.yaml") != std::string::npos);
    return;
  }
  for (const auto& tunnel : config->tunnels) {
    if (tunnel.auth) return;  // describe() prints fingerprints, not secrets: no round trip
  }
  const std::string text = dataplane::gw::describe(*config);
  auto again = dataplane::gw::load_gateway_config_string(text, "described.yaml");
  if (!again) {
    std::fprintf(stderr, "config_fuzz: describe() is refused: %s\n%s\n",
                 again.error().message.c_str(), text.c_str());
    FUZZ_CHECK(again.has_value());
  }
  again->source = config->source;
  FUZZ_CHECK(*again == *config);
}

void check_tunnel_item(const std::string& json) {
  auto tunnel = dataplane::gw::parse_tunnel_item(json, "add[0]");
  report("tunnel item", tunnel ? "" : tunnel.error().message);
  if (!tunnel) {
    FUZZ_CHECK(tunnel.error().message.rfind("add[0]", 0) == 0);
    return;
  }
}

void check_topology(const std::string& yaml) {
  auto topology = control::model::load_topology_string(yaml, "topology.yaml");
  report("topology", topology ? "" : topology.error().message);
  if (!topology) {
    FUZZ_CHECK(!topology.error().message.empty());
    return;
  }
  // Every cross reference was resolved: the indices cover the items.
  FUZZ_CHECK(topology->site_index.size() == topology->sites.size());
  FUZZ_CHECK(topology->link_index.size() == topology->links.size());
  FUZZ_CHECK(topology->gateway_index.size() == topology->gateways.size());
}

}  // namespace
}  // namespace detwan

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 16384) return 0;
  const uint8_t selector = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (selector == 0 || selector > 2) detwan::check_gateway(text);
  if (selector == 1 || selector > 2) detwan::check_tunnel_item(text);
  if (selector == 2 || selector > 2) detwan::check_topology(text);
  return 0;
}
