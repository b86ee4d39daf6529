#pragma once
// Reading a secret (a tunnel key, a tokens file) from a file that only its owner may touch.
//
// The file is opened once and everything is checked on that descriptor (fstat), so what is
// checked is what is read: it must be a regular file, owned by root or by this process's
// effective uid, and give group and others no access at all (mode 0600 or 0400). Anything else
// is refused with an error naming the file, its owner and its mode, e.g.
//   key file '/etc/detwan/k.key' (owner uid 1000, mode 0644): a secret must belong to root or
//   to uid 0 (this process) and be readable by its owner only (chmod 600)
// Setup tier: returns std::expected, never throws; `what` names the kind of file ("key file").
#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace detwan::common {

// The whole file (at most max_bytes; a longer file is refused as "not a <what>").
Result<std::string> read_secret_file(const std::string& path, std::string_view what,
                                     size_t max_bytes = 4096);

}  // namespace detwan::common
