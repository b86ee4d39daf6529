// detwan-bench transport recv: accepts one channel, reads the sender's plan, receives and checks
// every message (transport_pattern.h), answers "done", waits for the sender to close. With
// --channels K it accepts K channels and runs that on each, one thread per channel.
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tools/bench/transport_bench.h"
#include "tools/bench/transport_pattern.h"
#include "tools/bench/transport_report.h"
#include "transport/datagram/driver.h"
#include "transport/registry.h"

namespace detwan::bench {
namespace {

namespace json = boost::json;

uint64_t get_u64(const std::byte* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

constexpr int64_t kCloseWaitNs = 10'000'000'000;

// One channel's share of the transfer.
struct Share {
  uint64_t total_bytes = 0;
  uint64_t messages = 0;
  uint64_t received = 0;
  uint64_t bytes = 0;
  uint64_t wrong_bytes = 0;
  uint64_t wrong_messages = 0;
  uint64_t size_mismatches = 0;
  int64_t start_ns = 0;
  int64_t last_ns = 0;
  double verify_cpu_s = 0;
  std::vector<int64_t> latency_ns;
  bool peer_closed = false;
  std::string done_send_error;
  std::string error;
  transport::ChannelStats stats;
};

void recv_share(transport::Channel& ch, const RecvOptions& o, int64_t deadline_ns, Share& share) {
  auto remaining = [&] { return std::max<int64_t>(0, deadline_ns - monotonic_ns()); };
  auto plan_future = ch.recv();
  auto plan = await_result(plan_future, remaining(), "sender's plan message");
  if (!plan) {
    share.error = plan.error().describe();
    return;
  }
  if (plan->size() != kPlanBytes || std::memcmp(plan->data(), "DWBPLAN1", 8) != 0) {
    share.error = fmt::format("first message is not a detwan-bench plan ({} bytes)", plan->size());
    return;
  }
  const int64_t start_ns = monotonic_ns();
  const uint64_t total_bytes = get_u64(plan->data() + 8);
  const uint64_t msg_bytes = get_u64(plan->data() + 16);
  const uint64_t count = get_u64(plan->data() + 24);
  if (msg_bytes < MessagePattern::kHeaderBytes || count == 0 || total_bytes > msg_bytes * count ||
      total_bytes + msg_bytes <= msg_bytes * count) {
    share.error = fmt::format("inconsistent plan: {} bytes, {}-byte messages, {} messages",
                              total_bytes, msg_bytes, count);
    return;
  }
  share.total_bytes = total_bytes;
  share.messages = count;
  share.start_ns = start_ns;

  const MessagePattern pattern;
  share.latency_ns.reserve(count);
  share.last_ns = start_ns;
  // Two receives in flight, so the next message never waits for this thread to post one.
  auto current = ch.recv();
  std::future<common::Result<std::vector<std::byte>>> following;
  if (count > 1) following = ch.recv();
  for (uint64_t i = 0; i < count; ++i) {
    auto message = await_result(current, remaining(), fmt::format("message {} of {}", i, count));
    current = std::move(following);
    if (i + 2 < count) following = ch.recv();
    if (!message) {
      share.error = message.error().describe();
      break;
    }
    share.last_ns = monotonic_ns();
    const uint64_t expected = i + 1 < count ? msg_bytes : total_bytes - (count - 1) * msg_bytes;
    const double t = thread_cpu_s();
    const MessagePattern::Check check = pattern.verify(i, *message);
    share.verify_cpu_s += thread_cpu_s() - t;
    ++share.received;
    share.bytes += message->size();
    if (message->size() != expected) ++share.size_mismatches;
    share.wrong_bytes +=
        check.wrong_bytes +
        (message->size() > expected ? message->size() - expected : expected - message->size());
    if (check.wrong_bytes != 0 || check.index != i) ++share.wrong_messages;
    share.latency_ns.push_back(share.last_ns - check.send_time_ns);
    // Done with it: the channel may place a later message in its (mapped) pages, as the
    // collective library does with every message it has reduced.
    if (o.recycle) ch.recycle(std::move(*message));
  }
  bool done_failed = false;
  if (share.error.empty()) {
    std::vector<std::byte> done(8);
    std::memcpy(done.data(), "DWBDONE1", 8);
    auto sent = ch.send(done);
    if (auto r = await_result(sent, remaining(), "done message"); !r) {
      // The sender closes as soon as "done" arrives, possibly before its acknowledgement
      // reaches us: a close by the peer then means it got the message. Any other failure is
      // reported but does not fail the transfer: every message has already arrived and been
      // checked above.
      share.peer_closed = r.error().code == common::ErrorCode::kUnavailable;
      done_failed = true;
      share.done_send_error = r.error().describe();
    }
  }
  if (share.error.empty() && !done_failed) {
    // The sender closes once it has our "done": its close ends this receive.
    auto closing = ch.recv();
    auto r = await_result(closing, kCloseWaitNs, "sender's close");
    share.peer_closed = !r && r.error().code == common::ErrorCode::kUnavailable;
  }
  share.stats = ch.stats();
  ch.close();
}

}  // namespace

int run_recv(const RecvOptions& o) {
  const int channels = std::max(1, o.channels);
  json::object doc{{"role", "recv"},
                   {"backend", o.backend},
                   {"listen", o.listen},
                   {"channels", channels},
                   {"error", nullptr}};
  auto fail = [&](const std::string& message) {
    doc["error"] = message;
    if (o.json) print_json(doc);
    std::fprintf(stderr, "detwan-bench transport recv: %s\n", message.c_str());
    return 1;
  };
  transport::EndpointOptions eopts;
  eopts.accept_options.rate_bps = o.rate_bps / channels;
  eopts.accept_options.mtu_bytes = o.mtu_bytes;
  const auto [backend, config] = split_backend(o.backend);
  eopts.backend_config = config;
  eopts.security = o.security;
  doc["security"] = std::string(transport::to_string(o.security.mode));
  auto endpoint = transport::make_endpoint(backend, eopts);
  if (!endpoint) return fail(endpoint.error().describe());
  auto bound = (*endpoint)->listen(o.listen);
  if (!bound) return fail(bound.error().describe());
  doc["bound"] = *bound;
  std::fprintf(stderr, "listening %s\n", bound->c_str());
  std::fflush(stderr);
  std::vector<std::unique_ptr<transport::Channel>> accepted;
  for (int c = 0; c < channels; ++c) {
    auto channel = (*endpoint)->accept(o.accept_timeout_ns);
    if (!channel) return fail(channel.error().describe());
    accepted.push_back(std::move(*channel));
  }
  doc["channel"] = accepted.front()->describe();

  const double cpu_start_s = process_cpu_s();
  const int64_t deadline_ns = monotonic_ns() + o.timeout_ns;
  std::vector<Share> shares(static_cast<size_t>(channels));
  if (channels == 1) {
    recv_share(*accepted[0], o, deadline_ns, shares[0]);
  } else {
    std::vector<std::thread> threads;
    for (int c = 0; c < channels; ++c) {
      threads.emplace_back([&, c] { recv_share(*accepted[c], o, deadline_ns, shares[c]); });
    }
    for (auto& thread : threads) thread.join();
  }
  const double cpu_s = process_cpu_s() - cpu_start_s;

  uint64_t total_bytes = 0, count = 0, received = 0, bytes = 0, wrong_bytes = 0;
  uint64_t wrong_messages = 0, size_mismatches = 0;
  int64_t start_ns = INT64_MAX, last_ns = 0;
  double verify_cpu_s = 0;
  bool peer_closed = true;
  std::vector<int64_t> latency_ns;
  std::string error, done_send_error;
  for (const Share& share : shares) {
    total_bytes += share.total_bytes;
    count += share.messages;
    received += share.received;
    bytes += share.bytes;
    wrong_bytes += share.wrong_bytes;
    wrong_messages += share.wrong_messages;
    size_mismatches += share.size_mismatches;
    if (share.received > 0 || share.start_ns > 0) {
      start_ns = std::min(start_ns, share.start_ns);
      last_ns = std::max(last_ns, share.last_ns);
    }
    verify_cpu_s += share.verify_cpu_s;
    peer_closed = peer_closed && share.peer_closed;
    latency_ns.insert(latency_ns.end(), share.latency_ns.begin(), share.latency_ns.end());
    if (error.empty()) error = share.error;
    if (done_send_error.empty()) done_send_error = share.done_send_error;
  }
  if (start_ns == INT64_MAX) start_ns = last_ns;
  transport::ChannelStats stats = shares.front().stats;
  for (size_t i = 1; i < shares.size(); ++i) add_counters(stats, shares[i].stats);
  const double elapsed_s = static_cast<double>(last_ns - start_ns) * 1e-9;
  doc["size_bytes"] = total_bytes;
  doc["messages"] = count;
  doc["messages_received"] = received;
  doc["bytes_received"] = bytes;
  doc["wrong_bytes"] = wrong_bytes;
  doc["wrong_messages"] = wrong_messages;
  doc["size_mismatches"] = size_mismatches;
  doc["elapsed_ns"] = last_ns - start_ns;
  doc["goodput_bps"] = elapsed_s > 0 ? static_cast<double>(bytes) * 8 / elapsed_s : 0.0;
  doc["message_latency_ns"] = summarize_ns(std::move(latency_ns));
  doc["cpu_s"] = cpu_s;
  doc["verify_cpu_s"] = verify_cpu_s;
  doc["transport_cpu_s"] = std::max(0.0, cpu_s - verify_cpu_s);
  doc["peer_closed"] = peer_closed;
  if (!done_send_error.empty()) doc["done_send_error"] = done_send_error;
  doc["stats"] = stats_to_json(stats);
  // The endpoint's own counters (datagram backends): what it refused before any channel saw it.
  if (const auto* datagram = dynamic_cast<const transport::datagram::DatagramEndpointBase*>(
          endpoint->get())) {
    const transport::datagram::DriverCounters c = datagram->counters();
    doc["endpoint"] = json::object{{"datagrams_received", c.datagrams_received},
                                   {"dropped_not_transport", c.dropped_not_transport},
                                   {"dropped_unknown_connection", c.dropped_unknown_connection},
                                   {"dropped_auth", c.dropped_auth},
                                   {"dropped_mode_mismatch", c.dropped_mode_mismatch},
                                   {"handshakes_answered", c.handshakes_answered},
                                   {"half_open_evicted", c.half_open_evicted},
                                   {"connections_accepted", c.connections_accepted},
                                   {"reassembly_bytes", c.reassembly_bytes}};
  }
  if (!error.empty()) return fail(error);
  if (o.json) {
    print_json(doc);
  } else {
    std::printf(
        "received %llu bytes in %llu messages over %d channel(s) in %.3f s: %.1f Mbit/s, "
        "%llu wrong bytes, CPU %.2f s (checking %.2f s)\n",
        static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(received), channels,
        elapsed_s, static_cast<double>(bytes) * 8 / elapsed_s / 1e6,
        static_cast<unsigned long long>(wrong_bytes), cpu_s, verify_cpu_s);
  }
  return wrong_bytes == 0 ? 0 : 1;
}

}  // namespace detwan::bench
