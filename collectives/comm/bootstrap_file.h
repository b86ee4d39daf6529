#pragma once
// Private to the bootstrap: the shared-directory rendezvous (file:///DIR#SECRET).
#include <cstdint>
#include <memory>

#include "collectives/comm/bootstrap.h"
#include "collectives/comm/bootstrap_io.h"

namespace detwan::collectives::bootstrap {

Result<std::unique_ptr<Bootstrap>> join_file(const Spec& spec, int rank, int nranks);

}  // namespace detwan::collectives::bootstrap
