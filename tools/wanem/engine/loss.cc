#include "tools/wanem/engine/loss.h"

namespace detwan::wanem {

void GilbertElliottLoss::configure(const GilbertElliott& params) noexcept {
  if (!params.enabled || !params_.enabled) bad_ = false;
  params_ = params;
}

bool GilbertElliottLoss::lose(Rng& rng) noexcept {
  if (!params_.enabled) return false;
  // Same draw order as netem: transition first, then the loss decision of the old state.
  const bool was_bad = bad_;
  if (was_bad) {
    if (rng.bernoulli(params_.r_bad_to_good)) bad_ = false;
    return rng.bernoulli(params_.loss_in_bad);
  }
  if (rng.bernoulli(params_.p_good_to_bad)) bad_ = true;
  return rng.bernoulli(params_.loss_in_good);
}

double GilbertElliottLoss::mean_loss(const GilbertElliott& params) noexcept {
  const double sum = params.p_good_to_bad + params.r_bad_to_good;
  if (sum <= 0.0) return params.loss_in_good;  // never leaves the good state
  return (params.r_bad_to_good * params.loss_in_good + params.p_good_to_bad * params.loss_in_bad) /
         sum;
}

}  // namespace detwan::wanem
