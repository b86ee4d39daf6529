#pragma once
// Exact link instants live in common/link_time.h (shared with the dataplane's slot scheduler).
#include "common/link_time.h"

namespace detwan::wanem {
using common::add_bits;
using common::LinkTime;
using common::steps_until;
using LinkU128 = common::LinkUint128;
}  // namespace detwan::wanem
