#pragma once
// Point-to-point messages between the ranks of one communicator, over one transport channel
// per pair of ranks (shm/tcp inside a site, the detwan transport between sites).
//
// Matching: messages between two ranks are delivered in the order they were sent, and
// receives complete in the order they were posted (the transport's channel contract). The
// algorithms therefore never need tags: every rank posts the sends and receives of an
// operation for each peer in the same order its peer does (MPI's non-overtaking rule).
//
// Threading: one thread (the communicator's executor) posts and waits; transport callbacks
// complete the pending operations from the transports' progress threads. abort() and
// failure() may be called from any thread.
//
// Errors: a channel that fails (peer silent, closed, bad data) marks the Peers failed with the
// first such error, naming the peer; every later wait returns that error at once. A wait whose
// deadline expires returns kTimeout naming the peer it waited for, and also marks the Peers
// failed: the peer's state is unknown, so the communicator cannot go on (as NCCL).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/types.h"
#include "transport/transport.h"

namespace detwan::collectives {

// When a wait gives up: absolute CLOCK_MONOTONIC nanoseconds (common::monotonic_ns()).
struct Deadline {
  int64_t at_ns = INT64_MAX;
};

struct PeerFailure {
  int peer = -1;          // -1: not caused by one peer (local abort)
  Error error;            // message names the peer: "rank 2 (site b): ..."
};

class PendingSend {
 public:
  PendingSend() = default;
  [[nodiscard]] bool valid() const { return future_.valid(); }

 private:
  friend class Peers;
  int peer_ = -1;
  std::future<Result<void>> future_;
};

class PendingRecv {
 public:
  PendingRecv() = default;
  [[nodiscard]] bool valid() const { return future_.valid(); }

 private:
  friend class Peers;
  int peer_ = -1;
  std::future<Result<std::vector<std::byte>>> future_;
};

class Peers {
 public:
  // channels[r] connects to rank r; channels[rank] is null. peer_names[r] describes rank r in
  // error messages ("rank 2 (site b)"); empty = "rank r".
  Peers(int rank, std::vector<std::unique_ptr<transport::Channel>> channels,
        std::vector<std::string> peer_names = {});
  ~Peers();  // closes every channel (pending operations complete with kUnavailable)
  Peers(const Peers&) = delete;
  Peers& operator=(const Peers&) = delete;

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return static_cast<int>(channels_.size()); }
  [[nodiscard]] std::string peer_name(int peer) const;

  // Zero copy: `data` must stay valid and unmodified until wait() has returned for the
  // PendingSend (or flush() has). A message of 0 bytes is a valid message.
  [[nodiscard]] PendingSend send(int peer, std::span<const std::byte> data);
  // Copies `data` and returns at once; flush() waits for every such send. The copy is held
  // until the peer acknowledges it: retained_bytes() counts what is held now.
  void send_copy(int peer, std::span<const std::byte> data);
  [[nodiscard]] int64_t retained_bytes() const { return retained_->load(); }
  // How many bytes of copies the algorithms may keep unacknowledged before they fall back to
  // zero-copy sends (algo/detail.h); 64 MiB unless set. Executor thread only.
  static constexpr int64_t kDefaultRetainBudgetBytes = int64_t{64} << 20;
  [[nodiscard]] int64_t retain_budget_bytes() const { return retain_budget_bytes_; }
  void set_retain_budget_bytes(int64_t bytes) { retain_budget_bytes_ = bytes; }
  [[nodiscard]] PendingRecv recv(int peer);

  Result<void> wait(PendingSend& send, Deadline deadline);
  Result<std::vector<std::byte>> wait(PendingRecv& recv, Deadline deadline);
  // Next message from `peer` copied into `out`; its size must equal out.size() (else
  // kInvalidArgument naming both sizes: the ranks disagree about the operation).
  Result<void> recv_into(int peer, std::span<std::byte> out, Deadline deadline);
  // Waits for every send_copy so far.
  Result<void> flush(Deadline deadline);
  // Hands a received message's buffer back to the channel from `peer` once its contents have
  // been used: a later message from that peer may land in it (transport::Channel::recycle).
  void recycle(int peer, std::vector<std::byte> buffer);

  // Makes every pending and later wait fail with kUnavailable "aborted" (closes the channels).
  void abort();
  // Records `error` as the cause (if no failure is recorded yet; `peer` = the rank to blame or
  // -1) and closes the channels like abort(): for an operation that found the ranks disagree,
  // so the peers fail now instead of at their deadline, and failure() reports the real cause.
  void fail(int peer, const Error& error);
  [[nodiscard]] std::optional<PeerFailure> failure() const;
  // Statistics of the channel to `peer` (nullopt for self).
  [[nodiscard]] std::optional<transport::ChannelStats> channel_stats(int peer) const;

 private:
  Result<void> check_peer(int peer) const;
  void record_failure(int peer, const Error& error);
  Error failed_error() const;

  int rank_;
  std::vector<std::unique_ptr<transport::Channel>> channels_;
  std::vector<std::string> peer_names_;
  std::vector<PendingSend> copied_sends_;
  // Bytes of send_copy copies not yet acknowledged (shared with their completion callbacks).
  std::shared_ptr<std::atomic<int64_t>> retained_ = std::make_shared<std::atomic<int64_t>>(0);
  int64_t retain_budget_bytes_ = kDefaultRetainBudgetBytes;
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mutex_;
  std::optional<PeerFailure> failure_;
};

}  // namespace detwan::collectives
