// Regression test for "done never arrives" (detwan-bench transport send/recv): after a long
// lossy bulk transfer, the receiving side's first small reply on the same channel must still
// reach the sender.
//
// Cause: the protocol charges every datagram it emits, ACKs included, to the path's data pacer
// (proto ConnectionImpl::charge), but ACKs are never held back by that pacer. A best-effort
// receiver paces at cwnd / srtt from its initial RTT (it has sent no data, so no RTT sample), a
// low rate; a long transfer makes it emit ACKs faster than that, so its pacer horizon runs ahead
// of the clock without bound (seconds of debt per second of transfer). Its first DATA after the
// transfer (the reply) waits behind that horizon: the sender gives up waiting and closes ("peer
// closed the channel") or, when that CLOSE is lost, goes silent ("peer sent nothing").
//
// The test makes the debt large quickly and deterministically (server initial RTT 20 s: its
// pacer sits at the 8 kbit/s floor) and then waits for the reply far less long than the debt
// but far longer than the loopback round trip needs: a liveness check, not a timing one.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "tests/transport/security_util.h"
#include "tests/transport/datagram/channel_test_util.h"
#include "transport/loopback/endpoint.h"

namespace detwan::transport {
namespace {

using testing::connect_pair;
using testing::get;
using testing::random_bytes;

constexpr auto kReplyWait = std::chrono::seconds(15);

EndpointOptions endpoint_options(const std::string& config, const ChannelOptions& accept) {
  EndpointOptions options;
  options.security = testing::test_security();
  options.backend_config = config;
  options.accept_options = accept;
  return options;
}

// Bulk transfer client -> server with 1% loss, then one small reply server -> client; the
// server's reverse direction runs at `server_rate_bps` (0 = best effort).
void bulk_then_reply(int64_t server_rate_bps) {
  ChannelOptions client;
  client.rate_bps = 200'000'000;  // reserved: the bulk transfer is quick despite the loss
  client.initial_rtt_ns = 50'000'000;
  client.peer_timeout_ns = 30'000'000'000;
  ChannelOptions server;
  server.rate_bps = server_rate_bps;
  server.initial_rtt_ns = 20'000'000'000;
  server.peer_timeout_ns = 30'000'000'000;
  // Loss on the bulk direction only: the ACKs (and the reply) are never lost, so the reply
  // needs no retransmission timer (which the 20 s initial RTT would make slow).
  auto pair = connect_pair(loopback::make_endpoint, "",
                           endpoint_options("loss=0,delay=20ms,seed=3", server),
                           endpoint_options("loss=0.01,delay=20ms,seed=4", {}), client);
  ASSERT_TRUE(pair.client && pair.server);

  constexpr int kMessages = 64;
  constexpr size_t kMessageBytes = 64 * 1024;
  std::vector<std::vector<std::byte>> messages;
  for (int i = 0; i < kMessages; ++i) messages.push_back(random_bytes(kMessageBytes, i));
  // As the benchmark does: the sender asks for the reply before it starts sending.
  auto reply = testing::recv(*pair.client);
  ASSERT_NO_FATAL_FAILURE(testing::transfer_all(*pair.client, *pair.server, messages));
  ASSERT_GT(pair.client->stats().segments_retransmitted, 0u);  // the transfer was lossy

  const std::vector<std::byte> done = random_bytes(8, 99);
  auto done_sent = testing::send(*pair.server, done);
  ASSERT_EQ(reply.wait_for(kReplyWait), std::future_status::ready)
      << "the receiver's reply did not reach the sender (server pacer debt from its ACKs)";
  Result<std::vector<std::byte>> got = reply.get();
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_TRUE(*got == done);
  Result<void> acknowledged = get(done_sent);
  EXPECT_TRUE(acknowledged) << acknowledged.error().message;
}

// Best effort back to the client, like detwan-bench transport recv without --rate: fails until
// the protocol stops charging ACKs to the data pacer (see the comment at the top).
TEST(ReplyAfterBulk, BestEffortReceiverRepliesAfterLossyBulkTransfer) { bulk_then_reply(0); }

// Control: a reserved-rate reverse direction paces fast enough that its ACKs build no debt,
// so the same exchange works (this isolates the pacer as the cause, not path learning or the
// reply address).
TEST(ReplyAfterBulk, ReservedRateReceiverRepliesAfterLossyBulkTransfer) {
  bulk_then_reply(100'000'000);
}

}  // namespace
}  // namespace detwan::transport
