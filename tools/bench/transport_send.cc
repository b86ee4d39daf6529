// detwan-bench transport send: one bulk transfer of --size bytes in --message-size messages,
// every byte a checkable pattern (transport_pattern.h), with a bounded number of messages in
// flight (the channel reads them in place until acknowledged).
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "tools/bench/transport_bench.h"
#include "tools/bench/transport_pattern.h"
#include "tools/bench/transport_report.h"
#include "transport/registry.h"
#include "transport/registry.h"

namespace detwan::bench {
namespace {

namespace json = boost::json;
using transport::ChannelOptions;
using transport::PathSpec;

constexpr uint64_t kAutoInflightBytes = uint64_t{64} << 20;

void put_u64(std::byte* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(v >> (8 * i));
}

ChannelOptions channel_options(const SendOptions& o) {
  ChannelOptions c;
  c.rate_bps = o.rate_bps;
  c.mtu_bytes = o.mtu_bytes;
  c.fec.enabled = o.fec;
  c.fec.data_segments = o.fec_data_segments;
  c.fec.parity_segments = o.fec_parity_segments;
  if (o.remotes.size() > 1 || !o.locals.empty() || !o.path_rates_bps.empty()) {
    for (size_t i = 0; i < o.remotes.size(); ++i) {
      PathSpec p;
      p.remote = o.remotes[i];
      if (i < o.locals.size()) p.local = o.locals[i];
      p.rate_bps = i < o.path_rates_bps.size() ? o.path_rates_bps[i] : o.rate_bps;
      c.paths.push_back(p);
    }
  }
  return c;
}

// Slots of message buffers: a slot is reused only after the channel acknowledged its message.
struct Slots {
  std::mutex mutex;
  std::condition_variable freed;
  std::vector<bool> busy;
  uint64_t completed = 0;
  std::vector<int64_t> ack_latency_ns;
  std::string first_error;
};

}  // namespace

int run_send(const SendOptions& o) {
  const uint64_t msg_bytes = std::max<uint64_t>(o.message_bytes, MessagePattern::kHeaderBytes);
  const uint64_t count = std::max<uint64_t>(1, (o.size_bytes + msg_bytes - 1) / msg_bytes);
  auto size_of = [&](uint64_t i) {
    if (i + 1 < count) return msg_bytes;
    return std::max<uint64_t>(o.size_bytes - (count - 1) * msg_bytes,
                              MessagePattern::kHeaderBytes);
  };
  const uint64_t total_bytes = (count - 1) * msg_bytes + size_of(count - 1);
  const uint64_t inflight =
      std::min<uint64_t>(count, o.inflight_messages > 0
                                    ? static_cast<uint64_t>(o.inflight_messages)
                                    : std::max<uint64_t>(2, kAutoInflightBytes / msg_bytes));

  json::object doc{{"role", "send"},
                   {"backend", o.backend},
                   {"remote", o.remotes.empty() ? "" : o.remotes.front()},
                   {"size_bytes", total_bytes},
                   {"message_bytes", msg_bytes},
                   {"messages", count},
                   {"inflight_messages", inflight},
                   {"rate_bps", o.rate_bps},
                   {"fec", o.fec},
                   {"mtu_bytes", o.mtu_bytes},
                   {"error", nullptr}};
  json::array paths;
  const ChannelOptions copts = channel_options(o);
  for (const auto& p : copts.paths) {
    paths.push_back(json::object{{"remote", p.remote}, {"local", p.local},
                                 {"rate_bps", p.rate_bps}});
  }
  doc["paths"] = std::move(paths);
  auto fail = [&](const std::string& message) {
    doc["error"] = message;
    if (o.json) print_json(doc);
    std::fprintf(stderr, "detwan-bench transport send: %s\n", message.c_str());
    return 1;
  };
  if (o.remotes.empty()) return fail("no remote address");

  // Declared before the channel: callbacks may still run while the channel shuts down, so the
  // state they touch must outlive it.
  Slots slots;
  slots.busy.assign(inflight, false);
  slots.ack_latency_ns.reserve(count);
  std::vector<std::vector<std::byte>> buffers(inflight);
  std::vector<std::byte> plan(kPlanBytes);

  transport::EndpointOptions eopts;
  const auto [backend, config] = split_backend(o.backend);
  eopts.backend_config = config;
  auto endpoint = transport::make_endpoint(backend, eopts);
  if (!endpoint) return fail(endpoint.error().describe());
  auto channel = (*endpoint)->connect(o.remotes.front(), copts, o.connect_timeout_ns);
  if (!channel) return fail(channel.error().describe());
  transport::Channel& ch = **channel;
  doc["channel"] = ch.describe();

  const double cpu_start_s = process_cpu_s();
  double pattern_cpu_s = 0;
  const MessagePattern pattern;
  {
    const double t = thread_cpu_s();
    for (auto& b : buffers) b.resize(msg_bytes);
    pattern_cpu_s += thread_cpu_s() - t;
  }

  // The receiver's "done" comes back once every message arrived; ask for it before sending.
  auto done_future = ch.recv();

  std::memcpy(plan.data(), "DWBPLAN1", 8);
  put_u64(plan.data() + 8, total_bytes);
  put_u64(plan.data() + 16, msg_bytes);
  put_u64(plan.data() + 24, count);
  auto plan_future = ch.send(plan);

  const int64_t start_ns = monotonic_ns();
  const int64_t deadline_ns = start_ns + o.timeout_ns;
  bool timed_out = false;
  for (uint64_t i = 0; i < count && !timed_out; ++i) {
    size_t slot = 0;
    {
      std::unique_lock lock(slots.mutex);
      for (;;) {
        if (!slots.first_error.empty()) break;
        auto it = std::find(slots.busy.begin(), slots.busy.end(), false);
        if (it != slots.busy.end()) {
          slot = static_cast<size_t>(it - slots.busy.begin());
          slots.busy[slot] = true;
          break;
        }
        if (slots.freed.wait_for(lock, std::chrono::nanoseconds(
                                            std::max<int64_t>(0, deadline_ns - monotonic_ns()))) ==
            std::cv_status::timeout) {
          timed_out = true;
          break;
        }
      }
      if (!slots.first_error.empty() || timed_out) break;
    }
    std::span<std::byte> buf(buffers[slot].data(), size_of(i));
    const double t = thread_cpu_s();
    const int64_t send_ns = monotonic_ns();
    pattern.fill(i, send_ns, buf);
    pattern_cpu_s += thread_cpu_s() - t;
    ch.send_async(buf, [&slots, slot, send_ns](common::Result<void> r) {
      const int64_t now = monotonic_ns();
      std::lock_guard lock(slots.mutex);
      slots.busy[slot] = false;
      if (r) {
        ++slots.completed;
        slots.ack_latency_ns.push_back(now - send_ns);
      } else if (slots.first_error.empty()) {
        slots.first_error = r.error().describe();
      }
      slots.freed.notify_one();
    });
  }
  // Every message must be acknowledged (or fail) before the buffers may go.
  {
    std::unique_lock lock(slots.mutex);
    slots.freed.wait_until(lock, std::chrono::steady_clock::now() +
                                     std::chrono::nanoseconds(
                                         std::max<int64_t>(0, deadline_ns - monotonic_ns())),
                           [&] {
                             return std::none_of(slots.busy.begin(), slots.busy.end(),
                                                 [](bool b) { return b; });
                           });
  }
  const int64_t end_ns = monotonic_ns();
  std::string error;
  {
    std::lock_guard lock(slots.mutex);
    if (!slots.first_error.empty()) error = slots.first_error;
    else if (slots.completed != count) error = fmt::format(
        "only {} of {} messages acknowledged within {:.0f} s", slots.completed, count,
        static_cast<double>(o.timeout_ns) * 1e-9);
  }
  if (auto r = await_result(plan_future, 1'000'000'000, "plan message"); !r && error.empty()) {
    error = r.error().describe();
  }
  json::value receiver_done = nullptr;
  if (error.empty()) {
    // Every message is acknowledged, so every byte reached the receiver's transport; "done"
    // only confirms its application got them (its own report says whether they were right).
    // A missing "done" is therefore reported, not counted as a failed transfer.
    auto done = await_result(done_future, 10'000'000'000, "receiver's done message");
    if (!done) doc["warning"] = done.error().describe();
    else receiver_done = std::string(reinterpret_cast<const char*>(done->data()),
                                     std::min<size_t>(done->size(), 8));
  }
  const transport::ChannelStats stats = ch.stats();
  ch.close();
  channel->reset();  // joins the channel's work before `slots` and the buffers go
  const double cpu_s = process_cpu_s() - cpu_start_s;

  const double elapsed_s = static_cast<double>(end_ns - start_ns) * 1e-9;
  uint64_t acked_bytes = 0;
  {
    std::lock_guard lock(slots.mutex);
    acked_bytes = slots.completed == count ? total_bytes : slots.completed * msg_bytes;
    doc["messages_acknowledged"] = slots.completed;
    doc["ack_latency_ns"] = summarize_ns(slots.ack_latency_ns);
  }
  doc["bytes_acknowledged"] = acked_bytes;
  doc["elapsed_ns"] = end_ns - start_ns;
  doc["goodput_bps"] = elapsed_s > 0 ? static_cast<double>(acked_bytes) * 8 / elapsed_s : 0.0;
  doc["cpu_s"] = cpu_s;
  doc["pattern_cpu_s"] = pattern_cpu_s;
  doc["transport_cpu_s"] = std::max(0.0, cpu_s - pattern_cpu_s);
  doc["retransmissions"] = stats.segments_retransmitted;
  doc["receiver_done"] = receiver_done;
  doc["stats"] = stats_to_json(stats);
  if (!error.empty()) return fail(error);
  if (o.json) {
    print_json(doc);
  } else {
    std::printf("sent %llu bytes in %llu messages over %s in %.3f s: %.1f Mbit/s (acknowledged), "
                "%llu retransmitted segments, CPU %.2f s (pattern %.2f s)\n",
                static_cast<unsigned long long>(total_bytes),
                static_cast<unsigned long long>(count), doc["channel"].as_string().c_str(), elapsed_s,
                static_cast<double>(total_bytes) * 8 / elapsed_s / 1e6,
                static_cast<unsigned long long>(stats.segments_retransmitted), cpu_s,
                pattern_cpu_s);
  }
  return 0;
}

}  // namespace detwan::bench
