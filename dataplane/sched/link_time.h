#pragma once
// Exact link instants live in common/link_time.h (shared with the WAN emulator).
#include "common/link_time.h"

namespace detwan::dataplane::sched {
using common::add_bits;
using common::ceil_serialisation_ns;
using common::floor_div;
using common::LinkTime;
using Uint128 = common::LinkUint128;
}  // namespace detwan::dataplane::sched
