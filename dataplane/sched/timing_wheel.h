#pragma once
// Timing wheel (Carousel, SIGCOMM 2017): a ring of buckets of fixed granularity, each holding
// the entries whose timestamp falls in it. Insert and extract are O(1) for the common case of
// timestamps that arrive in order within a bucket; entries inside one bucket are kept sorted
// (stable for equal timestamps), so extraction is in exact timestamp order and only releases
// entries whose timestamp has come, whatever the granularity.
//
// The in-order run (issue 17, a cheaper wheel): a scheduler mostly inserts in timestamp order
// (one owner's frames leave one after another; a frame whose window is open and whose queue is
// empty leaves now). Such an entry -- no earlier than the run's last -- is appended to a FIFO
// list instead: no division to find its bucket, no bucket heads, tails or bitmap to touch, and
// extraction is a list pop. Only an earlier one goes into a bucket. So the run's last entry is
// the latest in the wheel, every bucketed entry is strictly earlier, and the buckets are empty
// whenever the run is. Every answer stays exactly what the buckets alone give (same entries,
// same order, same horizon): the run is merged with the buckets on extraction (run first on
// equal timestamps, which is insertion order, see pop_due()), and the cursor moves as if the
// run's entries sat in their buckets.
// tests/dataplane/sched/timing_wheel_test.cc checks this against a wheel built without the run.
//
// Horizon: an entry must fall within bucket_count buckets of the cursor (the bucket of the
// last extraction time); insert() refuses later ones (kBeyondHorizon). An entry whose time has
// already passed goes into the current bucket and is due at once.
//
// Fixed capacity, allocated at construction; afterwards nothing allocates or throws. clear()
// empties a used wheel for reuse (a scheduler keeps a spare one for run-time changes).
// Threading: one owner thread. Times must not go backwards between pop_due() calls.
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>

#include "dataplane/sched/link_time.h"

namespace detwan::dataplane::sched {

enum class WheelInsert : uint8_t { kOk = 0, kFull, kBeyondHorizon };

template <typename T>
class TimingWheel {
 public:
  // granularity_ns > 0. bucket_count is rounded up to a power of two, at least 64.
  // in_order_run = false keeps every entry in the buckets (the reference the tests compare
  // the run against; same answers, more work).
  TimingWheel(int64_t granularity_ns, uint32_t bucket_count, uint32_t capacity, int64_t start_ns,
              bool in_order_run = true)
      : granularity_ns_(granularity_ns > 0 ? granularity_ns : 1),
        bucket_count_(rounded_bucket_count(bucket_count)),
        capacity_(capacity),
        in_order_run_(in_order_run),
        nodes_(std::make_unique<Node[]>(capacity == 0 ? 1 : capacity)),
        heads_(std::make_unique<uint32_t[]>(bucket_count_)),
        tails_(std::make_unique<uint32_t[]>(bucket_count_)),
        bitmap_(std::make_unique<uint64_t[]>(bucket_count_ / 64)) {
    for (uint32_t i = 0; i < bucket_count_; ++i) heads_[i] = tails_[i] = kNil;
    for (uint32_t i = 0; i < capacity_; ++i) nodes_[i].next = i + 1 < capacity_ ? i + 1 : kNil;
    free_head_ = capacity_ > 0 ? 0 : kNil;
    set_cursor(bucket_of(start_ns));
  }

  // The bucket count a wheel constructed with bucket_count has.
  [[nodiscard]] static constexpr uint32_t rounded_bucket_count(uint32_t bucket_count) noexcept {
    return std::bit_ceil(bucket_count < 64 ? 64u : bucket_count);
  }

  [[nodiscard]] WheelInsert insert(int64_t ts_ns, const T& value) noexcept {
    if (free_head_ == kNil) return WheelInsert::kFull;
    // bucket_of(ts) - cursor >= bucket_count, without the division (floor semantics).
    if (ts_ns >= horizon_end_ns()) return WheelInsert::kBeyondHorizon;
    const uint32_t node = free_head_;
    free_head_ = nodes_[node].next;
    nodes_[node].ts_ns = ts_ns;
    nodes_[node].value = value;
    nodes_[node].next = kNil;
    ++size_;
    if (in_order_run_ && (run_head_ == kNil || nodes_[run_tail_].ts_ns <= ts_ns)) {
      if (run_head_ == kNil) {
        run_head_ = node;
      } else {
        nodes_[run_tail_].next = node;
      }
      run_tail_ = node;
      return WheelInsert::kOk;
    }
    insert_in_bucket(node, ts_ns);
    return WheelInsert::kOk;
  }

  // Removes the earliest entry with timestamp <= now_ns; false if there is none.
  [[nodiscard]] bool pop_due(int64_t now_ns, int64_t* ts_ns, T* value) noexcept {
    if (run_head_ != kNil) {
      const int64_t run_ts = nodes_[run_head_].ts_ns;
      // On equal timestamps the run's entry was inserted first: a bucketed entry is strictly
      // earlier than the run's last entry when inserted, and the run's later entries are no
      // earlier than that one.
      if (run_ts <= now_ns && (bucketed_ == 0 || run_ts <= bucketed_next_ts_ns())) {
        const uint32_t node = run_head_;
        run_head_ = nodes_[node].next;
        if (run_head_ == kNil) run_tail_ = kNil;
        // Where the buckets alone would leave the cursor: at the entry's bucket.
        advance_cursor_to(run_ts);
        return take(node, ts_ns, value);
      }
    }
    if (bucketed_ == 0) {
      advance_cursor_to(now_ns);
      return false;
    }
    const int64_t target = bucket_of(now_ns);
    for (;;) {
      const auto b = static_cast<uint32_t>(cursor_) & (bucket_count_ - 1);
      const uint32_t head = heads_[b];
      if (head != kNil) {
        if (nodes_[head].ts_ns > now_ns) return false;  // sorted: nothing else is due
        heads_[b] = nodes_[head].next;
        if (heads_[b] == kNil) {
          tails_[b] = kNil;
          bitmap_[b / 64] &= ~(uint64_t{1} << (b % 64));
        }
        --bucketed_;
        return take(head, ts_ns, value);
      }
      if (cursor_ >= target) return false;
      // Jump over empty buckets, but not past now.
      const int64_t distance = next_set_distance(b);
      set_cursor(distance < target - cursor_ ? cursor_ + distance : target);
    }
  }

  // Timestamp of the earliest entry; INT64_MAX when empty.
  [[nodiscard]] int64_t next_ts_ns() const noexcept {
    const int64_t run_ts =
        run_head_ != kNil ? nodes_[run_head_].ts_ns : std::numeric_limits<int64_t>::max();
    if (bucketed_ == 0) return run_ts;
    const int64_t bucket_ts = bucketed_next_ts_ns();
    return bucket_ts < run_ts ? bucket_ts : run_ts;
  }

  // Calls fn(ts_ns, const T&) for every entry in extraction order (timestamp, then insertion
  // order), without removing anything. Setup-time use (a scheduler being rebuilt); O(buckets /
  // 64 + entries).
  template <typename Fn>
  void for_each(Fn&& fn) const {
    uint32_t run = run_head_;
    const auto run_until = [&](int64_t ts_ns) {  // the run's entries that come first
      for (; run != kNil && nodes_[run].ts_ns <= ts_ns; run = nodes_[run].next) {
        fn(nodes_[run].ts_ns, static_cast<const T&>(nodes_[run].value));
      }
    };
    if (bucketed_ > 0) {
      auto b = static_cast<uint32_t>(cursor_) & (bucket_count_ - 1);
      for (uint32_t visited = 0; visited < bucket_count_;) {
        for (uint32_t node = heads_[b]; node != kNil; node = nodes_[node].next) {
          run_until(nodes_[node].ts_ns);
          fn(nodes_[node].ts_ns, static_cast<const T&>(nodes_[node].value));
        }
        const int64_t step = next_set_distance(b);
        visited += static_cast<uint32_t>(step);
        b = static_cast<uint32_t>((b + step) & (bucket_count_ - 1));
      }
    }
    run_until(std::numeric_limits<int64_t>::max());
  }

  // Empties the wheel and starts it again at start_ns: afterwards it behaves exactly like a wheel
  // just constructed with the same geometry at start_ns (same answers to every insert and
  // pop_due; only which node holds an entry differs, which nothing observes). Touches only what
  // is in use: one pass over the bitmap (bucket_count / 64 words), the occupied buckets and the
  // entries held; the nodes' memory stays allocated (and faulted in). No allocation.
  void clear(int64_t start_ns) noexcept {
    for (uint32_t word = 0; word < bucket_count_ / 64; ++word) {
      for (uint64_t bits = bitmap_[word]; bits != 0; bits &= bits - 1) {
        const uint32_t b = word * 64 + static_cast<uint32_t>(std::countr_zero(bits));
        free_list(heads_[b]);
        heads_[b] = tails_[b] = kNil;
      }
      bitmap_[word] = 0;
    }
    free_list(run_head_);
    run_head_ = run_tail_ = kNil;
    size_ = bucketed_ = 0;
    set_cursor(bucket_of(start_ns));
  }

  // Latest timestamp held; INT64_MIN when empty. Setup-time use.
  [[nodiscard]] int64_t last_ts_ns() const {
    int64_t last = std::numeric_limits<int64_t>::min();
    for_each([&](int64_t ts_ns, const T&) { last = ts_ns > last ? ts_ns : last; });
    return last;
  }

  // Moves the cursor forward to t_ns's bucket, but never past an entry held in the buckets
  // (entries in the in-order run do not depend on the cursor). A caller about to insert at or
  // after t_ns calls it first: after a stall longer than the horizon, the cursor still sits at
  // the stale entry just popped, and an insert at now would be refused as beyond a horizon
  // measured from there. Divides only when t_ns is past the cursor's bucket.
  void advance_cursor_toward(int64_t t_ns) noexcept {
    if (t_ns < cursor_end_ns_) return;
    int64_t target = bucket_of(t_ns);
    if (bucketed_ > 0) {
      const auto b = static_cast<uint32_t>(cursor_) & (bucket_count_ - 1);
      const int64_t first_bucketed = heads_[b] != kNil ? cursor_ : cursor_ + next_set_distance(b);
      target = target < first_bucketed ? target : first_bucketed;
    }
    if (target > cursor_) set_cursor(target);
  }

  // First timestamp that insert() would refuse as beyond the horizon.
  [[nodiscard]] int64_t horizon_end_ns() const noexcept {
    return (cursor_ + static_cast<int64_t>(bucket_count_)) * granularity_ns_;
  }
  [[nodiscard]] uint32_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] uint32_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] uint32_t bucket_count() const noexcept { return bucket_count_; }
  [[nodiscard]] int64_t granularity_ns() const noexcept { return granularity_ns_; }
  // Entries held in the buckets, not in the in-order run (for tests and benchmarks).
  [[nodiscard]] uint32_t bucketed_size() const noexcept { return bucketed_; }

 private:
  static constexpr uint32_t kNil = std::numeric_limits<uint32_t>::max();
  struct Node {
    int64_t ts_ns = 0;
    uint32_t next = kNil;
    T value{};
  };

  [[nodiscard]] int64_t bucket_of(int64_t ts_ns) const noexcept {
    return floor_div(ts_ns, granularity_ns_);
  }

  void set_cursor(int64_t bucket) noexcept {
    cursor_ = bucket;
    cursor_end_ns_ = (bucket + 1) * granularity_ns_;
  }

  // cursor = max(cursor, bucket_of(t_ns)); divides only when t_ns is past the cursor's bucket.
  void advance_cursor_to(int64_t t_ns) noexcept {
    if (t_ns >= cursor_end_ns_) set_cursor(bucket_of(t_ns));
  }

  void insert_in_bucket(uint32_t node, int64_t ts_ns) noexcept {
    ++bucketed_;
    int64_t bucket = bucket_of(ts_ns);
    if (bucket < cursor_) bucket = cursor_;
    const auto b = static_cast<uint32_t>(bucket) & (bucket_count_ - 1);
    if (heads_[b] == kNil) {
      heads_[b] = tails_[b] = node;
      bitmap_[b / 64] |= uint64_t{1} << (b % 64);
    } else if (nodes_[tails_[b]].ts_ns <= ts_ns) {  // in order: O(1)
      nodes_[tails_[b]].next = node;
      tails_[b] = node;
    } else {  // out of order within the bucket: keep it sorted, after equal timestamps
      uint32_t prev = kNil;
      uint32_t cur = heads_[b];
      while (cur != kNil && nodes_[cur].ts_ns <= ts_ns) {
        prev = cur;
        cur = nodes_[cur].next;
      }
      nodes_[node].next = cur;
      if (prev == kNil) {
        heads_[b] = node;
      } else {
        nodes_[prev].next = node;
      }
    }
  }

  // Timestamp of the earliest entry in the buckets; bucketed_ > 0. Every bucketed entry sits at
  // or after the cursor, and the cursor's bucket holds the earliest ones first.
  [[nodiscard]] int64_t bucketed_next_ts_ns() const noexcept {
    const auto b = static_cast<uint32_t>(cursor_) & (bucket_count_ - 1);
    if (heads_[b] != kNil) return nodes_[heads_[b]].ts_ns;
    const auto next = static_cast<uint32_t>((b + next_set_distance(b)) & (bucket_count_ - 1));
    return nodes_[heads_[next]].ts_ns;
  }

  bool take(uint32_t node, int64_t* ts_ns, T* value) noexcept {
    *ts_ns = nodes_[node].ts_ns;
    *value = nodes_[node].value;
    nodes_[node].next = free_head_;
    free_head_ = node;
    --size_;
    return true;
  }

  void free_list(uint32_t node) noexcept {
    while (node != kNil) {
      const uint32_t next = nodes_[node].next;
      nodes_[node].next = free_head_;
      free_head_ = node;
      node = next;
    }
  }

  // Distance (1 .. bucket_count-1) from bucket b to the next non-empty bucket, circularly;
  // bucket_count if every other bucket is empty.
  [[nodiscard]] int64_t next_set_distance(uint32_t b) const noexcept {
    const uint32_t words = bucket_count_ / 64;
    uint32_t word = b / 64;
    // Bits above b in its own word first.
    const uint32_t shift = b % 64 + 1;
    uint64_t bits = shift == 64 ? 0 : bitmap_[word] & (~uint64_t{0} << shift);
    for (uint32_t step = 0; step <= words; ++step) {
      if (bits != 0) {
        const uint32_t found = word * 64 + static_cast<uint32_t>(std::countr_zero(bits));
        return (static_cast<int64_t>(found) - b + bucket_count_) % bucket_count_;
      }
      word = (word + 1) % words;
      bits = bitmap_[word];
      if (word == b / 64) bits &= (uint64_t{1} << (b % 64)) - 1;  // wrapped: only bits below b
    }
    return bucket_count_;
  }

  int64_t granularity_ns_;
  uint32_t bucket_count_;
  uint32_t capacity_;
  bool in_order_run_;
  std::unique_ptr<Node[]> nodes_;
  std::unique_ptr<uint32_t[]> heads_;
  std::unique_ptr<uint32_t[]> tails_;
  std::unique_ptr<uint64_t[]> bitmap_;
  int64_t cursor_ = 0;         // bucket number (absolute) of the last extraction time
  int64_t cursor_end_ns_ = 0;  // start of the bucket after the cursor's
  uint32_t free_head_ = kNil;
  uint32_t size_ = 0;
  // The in-order run: a FIFO list of nodes, timestamps non-decreasing.
  uint32_t run_head_ = kNil;
  uint32_t run_tail_ = kNil;
  uint32_t bucketed_ = 0;  // entries in the buckets
};

}  // namespace detwan::dataplane::sched
