#pragma once
// One counter registry: a counter struct's uint64_t members listed once, each with its key in
// the program's stats JSON and its family in the Prometheus exposition, so that the stats, the
// exposition and the sums over shards are written from the same list and cannot drift (a
// counter added to the struct but not to its table fails the table's size check, a
// static_assert next to the table; docs/metrics.md, "One list per counter set").
//
//   struct PortIo { uint64_t rx_packets = 0, ...; };
//   inline constexpr common::CounterField<PortIo> kPortIoFields[] = {
//       {&PortIo::rx_packets, "rx_packets", "rx_packets_total", "Datagrams received"}, ...};
//   static_assert(common::counter_table_covers<PortIo>(std::size(kPortIoFields)));
//
// The exposition writes `prefix + metric` (prefix: the family prefix of the owner, e.g.
// "detwan_gw_port_"), with the caller's labels plus the field's constant label if it has one;
// common/prometheus.h `Exposition::counters` does that. A counter with a constant label shares
// its family with its siblings (loop_timer_wakeups and loop_io_wakeups are both
// detwan_gw_loop_wakeups_total, cause="timer" / "io").
//
// Threading: tables are constants; the helpers touch only their arguments.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace detwan::common {

template <typename Counters>
struct CounterField {
  uint64_t Counters::*member;
  std::string_view key;     // key in the stats JSON object of the struct
  std::string_view metric;  // family name after the owner's prefix, ending in _total
  std::string_view help;    // # HELP text
  std::string_view label_name = {};   // a constant label of the sample ("": none)
  std::string_view label_value = {};
};

// True when a table of `fields` entries (plus `extra_words` uint64_t held elsewhere in the struct,
// such as per-reason arrays written by hand) accounts for every byte of Counters: then every
// member is a uint64_t the table or the extra words name.
template <typename Counters>
constexpr bool counter_table_covers(size_t fields, size_t extra_words = 0) {
  return sizeof(Counters) == (fields + extra_words) * sizeof(uint64_t);
}

// into += from, field by field.
template <typename Counters, size_t N>
void add_counters(Counters& into, const Counters& from,
                  const CounterField<Counters> (&fields)[N]) noexcept {
  for (const CounterField<Counters>& f : fields) into.*f.member += from.*f.member;
}

// Calls put(key, value) for every field, in table order (a stats JSON object's members).
template <typename Counters, size_t N, typename Put>
void for_each_counter(const Counters& counters, const CounterField<Counters> (&fields)[N],
                      Put&& put) {
  for (const CounterField<Counters>& f : fields) put(f.key, counters.*f.member);
}

}  // namespace detwan::common
