// detwan-bench transport send: one bulk transfer of --size bytes in --message-size messages,
// every byte a checkable pattern (transport_pattern.h), with a bounded number of messages in
// flight (the channel reads them in place until acknowledged). --channels K splits it into K
// equal shares, each an independent transfer (its own plan, messages and "done") on its own
// channel and sending thread, at rate / K each: with backend_config threads=N the endpoint
// spreads the channels over N progress threads.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tools/bench/transport_bench.h"
#include "tools/bench/transport_pattern.h"
#include "tools/bench/transport_report.h"
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

// One channel's options; a reservation is split evenly over the channels, so their rates sum to
// it whichever progress threads carry them.
ChannelOptions channel_options(const SendOptions& o) {
  const int64_t channels = std::max(1, o.channels);
  ChannelOptions c;
  c.rate_bps = o.rate_bps / channels;
  c.mtu_bytes = o.mtu_bytes;
  c.fec.enabled = o.fec;
  c.fec.data_segments = o.fec_data_segments;
  c.fec.parity_segments = o.fec_parity_segments;
  if (o.remotes.size() > 1 || !o.locals.empty() || !o.path_rates_bps.empty()) {
    for (size_t i = 0; i < o.remotes.size(); ++i) {
      PathSpec p;
      p.remote = o.remotes[i];
      if (i < o.locals.size()) p.local = o.locals[i];
      p.rate_bps = (i < o.path_rates_bps.size() ? o.path_rates_bps[i] : o.rate_bps) / channels;
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

// One share: an independent transfer of `bytes` over one channel, run on its own thread.
struct Share {
  uint64_t bytes = 0;  // asked for
  uint64_t total_bytes = 0;
  uint64_t messages = 0;
  uint64_t inflight = 0;
  uint64_t completed = 0;
  uint64_t acked_bytes = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  double pattern_cpu_s = 0;  // this share's thread only
  std::vector<int64_t> ack_latency_ns;
  std::string error;
  std::string warning;
  json::value receiver_done = nullptr;
  transport::ChannelStats stats;
};

void send_share(std::unique_ptr<transport::Channel>& channel, const SendOptions& o, Share& share) {
  const uint64_t msg_bytes = std::max<uint64_t>(o.message_bytes, MessagePattern::kHeaderBytes);
  const uint64_t count = std::max<uint64_t>(1, (share.bytes + msg_bytes - 1) / msg_bytes);
  auto size_of = [&](uint64_t i) {
    if (i + 1 < count) return msg_bytes;
    return std::max<uint64_t>(share.bytes - (count - 1) * msg_bytes, MessagePattern::kHeaderBytes);
  };
  const uint64_t total_bytes = (count - 1) * msg_bytes + size_of(count - 1);
  const uint64_t inflight = std::min<uint64_t>(
      count, o.inflight_messages > 0 ? static_cast<uint64_t>(o.inflight_messages)
                                     : std::max<uint64_t>(2, kAutoInflightBytes / msg_bytes));
  share.total_bytes = total_bytes;
  share.messages = count;
  share.inflight = inflight;
  transport::Channel& ch = *channel;

  // Declared before the channel is reset: callbacks may still run while the channel shuts
  // down, so the state they touch must outlive it.
  Slots slots;
  slots.busy.assign(inflight, false);
  slots.ack_latency_ns.reserve(count);
  std::vector<std::vector<std::byte>> buffers(inflight);
  std::vector<std::byte> plan(kPlanBytes);

  const MessagePattern pattern;
  {
    const double t = thread_cpu_s();
    for (auto& b : buffers) b.resize(msg_bytes);
    share.pattern_cpu_s += thread_cpu_s() - t;
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
    share.pattern_cpu_s += thread_cpu_s() - t;
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
    slots.freed.wait_until(
        lock,
        std::chrono::steady_clock::now() +
            std::chrono::nanoseconds(std::max<int64_t>(0, deadline_ns - monotonic_ns())),
        [&] {
          return std::none_of(slots.busy.begin(), slots.busy.end(), [](bool b) { return b; });
        });
  }
  share.start_ns = start_ns;
  share.end_ns = monotonic_ns();
  {
    std::lock_guard lock(slots.mutex);
    if (!slots.first_error.empty())
      share.error = slots.first_error;
    else if (slots.completed != count)
      share.error = fmt::format("only {} of {} messages acknowledged within {:.0f} s",
                                slots.completed, count, static_cast<double>(o.timeout_ns) * 1e-9);
  }
  if (auto r = await_result(plan_future, 1'000'000'000, "plan message");
      !r && share.error.empty()) {
    share.error = r.error().describe();
  }
  if (share.error.empty()) {
    // Every message is acknowledged, so every byte reached the receiver's transport; "done"
    // only confirms its application got them (its own report says whether they were right).
    // A missing "done" is therefore reported, not counted as a failed transfer.
    auto done = await_result(done_future, 10'000'000'000, "receiver's done message");
    if (!done)
      share.warning = done.error().describe();
    else
      share.receiver_done = std::string(reinterpret_cast<const char*>(done->data()),
                                        std::min<size_t>(done->size(), 8));
  }
  share.stats = ch.stats();
  ch.close();
  channel.reset();  // joins the channel's work before `slots` and the buffers go
  std::lock_guard lock(slots.mutex);
  share.completed = slots.completed;
  share.acked_bytes = slots.completed == count ? total_bytes : slots.completed * msg_bytes;
  share.ack_latency_ns = std::move(slots.ack_latency_ns);
}

}  // namespace

int run_send(const SendOptions& o) {
  const uint64_t channels = static_cast<uint64_t>(std::max(1, o.channels));
  const uint64_t msg_bytes = std::max<uint64_t>(o.message_bytes, MessagePattern::kHeaderBytes);
  std::vector<Share> shares(channels);
  for (uint64_t c = 0; c < channels; ++c) {
    shares[c].bytes = o.size_bytes / channels + (c + 1 == channels ? o.size_bytes % channels : 0);
  }
  json::object doc{{"role", "send"},
                   {"backend", o.backend},
                   {"remote", o.remotes.empty() ? "" : o.remotes.front()},
                   {"channels", channels},
                   {"message_bytes", msg_bytes},
                   {"rate_bps", o.rate_bps},
                   {"fec", o.fec},
                   {"mtu_bytes", o.mtu_bytes},
                   {"error", nullptr}};
  json::array paths;
  const ChannelOptions copts = channel_options(o);
  for (const auto& p : copts.paths) {
    paths.push_back(
        json::object{{"remote", p.remote}, {"local", p.local}, {"rate_bps", p.rate_bps}});
  }
  doc["paths"] = std::move(paths);
  auto fail = [&](const std::string& message) {
    doc["error"] = message;
    if (o.json) print_json(doc);
    std::fprintf(stderr, "detwan-bench transport send: %s\n", message.c_str());
    return 1;
  };
  if (o.remotes.empty()) return fail("no remote address");

  transport::EndpointOptions eopts;
  const auto [backend, config] = split_backend(o.backend);
  eopts.backend_config = config;
  eopts.security = o.security;
  doc["security"] = std::string(transport::to_string(o.security.mode));
  auto endpoint = transport::make_endpoint(backend, eopts);
  if (!endpoint) return fail(endpoint.error().describe());
  std::vector<std::unique_ptr<transport::Channel>> opened(channels);
  for (uint64_t c = 0; c < channels; ++c) {
    auto channel = (*endpoint)->connect(o.remotes.front(), copts, o.connect_timeout_ns);
    if (!channel) return fail(channel.error().describe());
    opened[c] = std::move(*channel);
  }
  doc["channel"] = opened.front()->describe();

  const double cpu_start_s = process_cpu_s();
  if (channels == 1) {
    send_share(opened[0], o, shares[0]);
  } else {
    std::vector<std::thread> threads;
    for (uint64_t c = 0; c < channels; ++c) {
      threads.emplace_back([&, c] { send_share(opened[c], o, shares[c]); });
    }
    for (auto& thread : threads) thread.join();
  }
  const double cpu_s = process_cpu_s() - cpu_start_s;

  int64_t start_ns = INT64_MAX, end_ns = 0;
  uint64_t total_bytes = 0, count = 0, completed = 0, acked_bytes = 0, inflight = 0;
  double pattern_cpu_s = 0;
  std::vector<int64_t> ack_latency_ns;
  std::string error, warning;
  json::value receiver_done = nullptr;
  for (Share& share : shares) {
    start_ns = std::min(start_ns, share.start_ns);
    end_ns = std::max(end_ns, share.end_ns);
    total_bytes += share.total_bytes;
    count += share.messages;
    completed += share.completed;
    acked_bytes += share.acked_bytes;
    inflight += share.inflight;
    pattern_cpu_s += share.pattern_cpu_s;
    ack_latency_ns.insert(ack_latency_ns.end(), share.ack_latency_ns.begin(),
                          share.ack_latency_ns.end());
    if (error.empty()) error = share.error;
    if (warning.empty()) warning = share.warning;
    if (&share == &shares.front() || !share.receiver_done.is_string()) {
      receiver_done = share.receiver_done;
    }
  }
  transport::ChannelStats stats = shares.front().stats;
  for (size_t i = 1; i < shares.size(); ++i) add_counters(stats, shares[i].stats);
  const double elapsed_s = static_cast<double>(end_ns - start_ns) * 1e-9;
  doc["size_bytes"] = total_bytes;
  doc["messages"] = count;
  doc["inflight_messages"] = inflight;
  doc["messages_acknowledged"] = completed;
  doc["ack_latency_ns"] = summarize_ns(std::move(ack_latency_ns));
  doc["bytes_acknowledged"] = acked_bytes;
  doc["elapsed_ns"] = end_ns - start_ns;
  doc["goodput_bps"] = elapsed_s > 0 ? static_cast<double>(acked_bytes) * 8 / elapsed_s : 0.0;
  doc["cpu_s"] = cpu_s;
  doc["pattern_cpu_s"] = pattern_cpu_s;
  doc["transport_cpu_s"] = std::max(0.0, cpu_s - pattern_cpu_s);
  doc["retransmissions"] = stats.segments_retransmitted;
  doc["receiver_done"] = receiver_done;
  if (!warning.empty()) doc["warning"] = warning;
  doc["stats"] = stats_to_json(stats);
  if (channels > 1) {
    json::array per_channel;
    for (const Share& share : shares) {
      const double s = static_cast<double>(share.end_ns - share.start_ns) * 1e-9;
      per_channel.push_back(json::object{
          {"bytes_acknowledged", share.acked_bytes},
          {"elapsed_ns", share.end_ns - share.start_ns},
          {"goodput_bps", s > 0 ? static_cast<double>(share.acked_bytes) * 8 / s : 0.0},
          {"retransmissions", share.stats.segments_retransmitted}});
    }
    doc["per_channel"] = std::move(per_channel);
  }
  if (!error.empty()) return fail(error);
  if (o.json) {
    print_json(doc);
  } else {
    std::printf(
        "sent %llu bytes in %llu messages over %s%s in %.3f s: %.1f Mbit/s "
        "(acknowledged), %llu retransmitted segments, CPU %.2f s (pattern %.2f s)\n",
        static_cast<unsigned long long>(total_bytes), static_cast<unsigned long long>(count),
        doc["channel"].as_string().c_str(),
        channels > 1 ? fmt::format(" and {} more channels", channels - 1).c_str() : "", elapsed_s,
        static_cast<double>(total_bytes) * 8 / elapsed_s / 1e6,
        static_cast<unsigned long long>(stats.segments_retransmitted), cpu_s, pattern_cpu_s);
  }
  return 0;
}

}  // namespace detwan::bench
