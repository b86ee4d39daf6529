#pragma once
// intel-ipsec-mb's process-wide manager, shared by the gateway's tunnel AEAD
// (dataplane/aead/aead_ipsec_mb.cc) and the transport's channel cipher
// (transport/crypto/cipher_ipsec_mb.cc); included only where the library is built in. It
// dispatches once, at set-up, to the best code for the CPU; the single-call GCM functions keep
// no state in it, so threads share it. nullptr if the library cannot start on this CPU.
#include <intel-ipsec-mb.h>

namespace detwan::common {

inline IMB_MGR* ipsec_mb_manager() noexcept {
  static IMB_MGR* const mgr = [] {
    IMB_MGR* m = alloc_mb_mgr(0);
    if (m != nullptr) init_mb_mgr_auto(m, nullptr);
    return m;
  }();
  return mgr;
}

}  // namespace detwan::common
