#pragma once
// The readable form of a running gateway's "tunnels" answer (gw::Engine::tunnels_json, schema in
// docs/gateway.md) printed by `detwan-gw tunnels`: the generation and boot id, one line per
// tunnel (id, peer, owner, rate, guaranteed rate, slots, bound, match), the WAN ports and peers.
// Missing fields print as "-".
#include <string>

#include <boost/json/value.hpp>

namespace detwan::dataplane::daemon {

std::string format_tunnels_table(const boost::json::value& tunnels);

}  // namespace detwan::dataplane::daemon
