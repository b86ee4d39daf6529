#pragma once
// torch.distributed backend "detwan": a c10d::ProcessGroup over the collective library's C++ API
// (collectives/comm/communicator.h). docs/pytorch.md describes its use.
//
// Rendezvous: rank 0 starts the library's bootstrap root and publishes its UniqueId in the
// process group's store (torchrun's or init_process_group's); the others read it from there.
// The id carries the rendezvous secret unless every rank has DETWAN_BOOTSTRAP_SECRET: then the
// root uses that and the store gets the id without it (a store is readable by whoever reaches
// it).
// Everything else comes from the environment as for any detwan job (CommConfig::from_environment:
// DETWAN_SITE, DETWAN_RESERVATION, DETWAN_AGENT, ...); the process group's timeout replaces
// DETWAN_TIMEOUT_MS.
//
// Every operation is submitted to the communicator at once and returns a DetwanWork; the
// communicator's executor runs operations in issue order and a Completer thread completes the
// Work objects (and their Futures) in the same order. CPU tensors only.
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "collectives/comm/communicator.h"
#include "collectives/torch/work.h"

namespace detwan::torch_backend {

class ProcessGroupDetwan : public c10d::ProcessGroup {
 public:
  // What Backend.register_backend calls (store, rank, world size, timeout).
  static c10::intrusive_ptr<c10d::ProcessGroup> create(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      std::chrono::milliseconds timeout);

  ProcessGroupDetwan(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupDetwan() override;

  const std::string getBackendName() const override { return "detwan"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // All ranks start counting collectives at 0 together (the group is created collectively).
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  // The communicator's configuration and the plan it would pick for `bytes` of allreduce.
  [[nodiscard]] std::string describe() const;
  [[nodiscard]] std::string plan(int64_t bytes) const;
  // Fails pending operations at once and closes the channels (the rank is leaving).
  void abort();

 private:
  using Epilogue = std::function<void()>;
  c10::intrusive_ptr<c10d::Work> issue(c10d::OpType type, const char* what,
                                       std::vector<collectives::OpDesc> ops,
                                       std::vector<at::Tensor> outputs, Epilogue epilogue,
                                       std::vector<at::Tensor> keep);
  std::string describe_failure(const DetwanWork& work, const common::Error& error) const;

  std::unique_ptr<collectives::Communicator> comm_;
  std::unique_ptr<Completer> completer_;
  std::mutex issue_mutex_;  // the communicator takes operations from one thread at a time
  uint64_t sequence_ = 0;
};

}  // namespace detwan::torch_backend
