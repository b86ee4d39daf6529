#pragma once
// A compute pool: accelerators or CPUs of one site that the agent may place a job's ranks on
// (docs/control-api.md, "Compute pools"). Registered through the API (detwanctl pool register),
// journaled, and read by the placement planner (placement.h).
//
//   name         unique in the domain, [A-Za-z0-9._-]{1,64}
//   site         a site of the topology
//   kind         "cpu", "a100", "mi250", ... (free text, [a-z0-9._-]{1,32}): the job gives its
//                compute time per step per kind
//   ranks        ranks (processes, one accelerator or a CPU share each) it can host at once
//   windows      when it is available ([start, end) Unix ns; none = always)
//   reference    a measured reference step: the PyTorch model of docs/pytorch.md run for a few
//                steps on one rank of the pool (detwanctl pool register --measure):
//                {step_ns, steps, gradient_bytes, model, measured_unix_ns, backward_ns}
//                (backward_ns: the backward pass's part of step_ns, optional; the planner's
//                overlap of allreduce and backward uses its share)
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "common/status.h"

namespace detwan::control::compute {

struct Window {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

struct Reference {
  int64_t step_ns = 0;           // mean compute time of one step on one rank
  uint32_t steps = 0;            // steps measured (after warm-up)
  uint64_t gradient_bytes = 0;   // the reference model's gradient
  std::string model;             // what ran ("mlp-4x1024", ...)
  int64_t measured_unix_ns = 0;
  int64_t backward_ns = 0;       // of step_ns, in the backward pass; 0: not measured
};

struct Pool {
  std::string name;
  std::string site;
  std::string kind;
  uint32_t ranks = 0;
  std::vector<Window> windows;
  std::optional<Reference> reference;
  int64_t registered_unix_ns = 0;

  // Ranks it offers for the whole of [start, end): all of them when a window covers it.
  [[nodiscard]] uint32_t ranks_during(int64_t start_ns, int64_t end_ns) const;
};

boost::json::object to_json(const Pool& pool);
// A pool from its JSON (the API's body or the journal's). Errors name the field
// ("field 'ranks': must be an integer 1..4096"). Sites are checked by the caller.
common::Result<Pool> pool_from_json(const boost::json::value& value);

}  // namespace detwan::control::compute
