#pragma once
// Random loss processes.
//
// Bernoulli: each frame is lost with probability `loss`, independently.
//
// Gilbert-Elliott (netem's gemodel, 4 parameters p, r, 1-h, 1-k): a two-state Markov chain
// stepped once per frame. For each frame, as netem does, the chain first draws its transition
// (good->bad with p, bad->good with r) and then the frame is lost with the loss probability of
// the state it was in *before* that transition (1-k in good, 1-h in bad). The chain starts good.
// Long-run: P(bad) = p / (p + r); mean loss = (r (1-k) + p (1-h)) / (p + r); with 1-h = 1 and
// 1-k = 0, losses come in bursts of geometric length with mean 1/r.
#include "tools/wanem/engine/random.h"
#include "tools/wanem/engine/spec.h"

namespace detwan::wanem {

class BernoulliLoss {
 public:
  // Draws only when 0 < loss, so a zero rate leaves the stream untouched.
  [[nodiscard]] static bool lose(double loss, Rng& rng) noexcept {
    return loss > 0.0 && rng.bernoulli(loss);
  }
};

class GilbertElliottLoss {
 public:
  // Adopts new parameters; keeps the current state unless the model was off (then: good).
  void configure(const GilbertElliott& params) noexcept;
  // Steps the chain for one frame; true if that frame is lost. False (no draw) when disabled.
  [[nodiscard]] bool lose(Rng& rng) noexcept;

  [[nodiscard]] bool in_bad_state() const noexcept { return bad_; }

  // Long-run loss rate of the chain (theory, for tests and the docs).
  [[nodiscard]] static double mean_loss(const GilbertElliott& params) noexcept;

 private:
  GilbertElliott params_;
  bool bad_ = false;
};

}  // namespace detwan::wanem
