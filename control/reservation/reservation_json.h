#pragma once
// Reservations as JSON: the API's representation (docs/control-api.md) and the journal's, one
// codec for both so a restart reads back exactly what clients saw.
#include <boost/json.hpp>

#include "common/status.h"
#include "control/reservation/reservation.h"

namespace detwan::control::reservation {

// Tunnel keys: the API shows their ids and fingerprints; only the journal holds the secrets.
enum class Secrets : uint8_t { kOmit, kInclude };
boost::json::object to_json(const Reservation& reservation, Secrets secrets = Secrets::kOmit);
boost::json::object bound_to_json(const admission::Bound& bound);
// Errors name the missing or malformed field ("reservation r-3: field 'spec.end_unix_ns' ...").
common::Result<Reservation> from_json(const boost::json::object& object);

}  // namespace detwan::control::reservation
