#pragma once
// The wire format's big-endian loads and stores: common/byte_order.h, under this namespace's
// names.
#include "common/byte_order.h"

namespace detwan::dataplane::wire {

using common::load_be16;
using common::load_be32;
using common::load_be64;
using common::store_be16;
using common::store_be32;
using common::store_be64;

}  // namespace detwan::dataplane::wire
