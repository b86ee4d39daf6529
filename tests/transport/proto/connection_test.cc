// Connection lifecycle and delivery on a clean virtual network.
#include "transport/proto/connection.h"

#include <gtest/gtest.h>

#include "tests/transport/proto/test_util.h"
#include "transport/proto/wire.h"

namespace detwan::transport::proto::testing {
namespace {

TEST(Connection, HandshakeEstablishesBothSides) {
  VirtualNet net(reserved_options(), reserved_options());
  EXPECT_FALSE(net.client().established());
  ASSERT_TRUE(net.run_until(
      [&] { return count_events(net.events(0), Event::Kind::kEstablished) == 1; }, 1'000'000'000));
  ASSERT_TRUE(net.has_server());
  EXPECT_TRUE(net.client().established());
  EXPECT_TRUE(net.server().established());
  EXPECT_EQ(net.server().connection_id(), net.client().connection_id());
  EXPECT_EQ(count_events(net.events(1), Event::Kind::kEstablished), 1u);
  EXPECT_EQ(net.client().max_datagram_bytes(), 1472u);
}

TEST(Connection, HelloRetransmittedWhenLost) {
  VirtualNet net(reserved_options(), reserved_options());
  int hellos_dropped = 0;
  net.tamper = [&](int side, std::vector<std::byte>& d) {
    if (side == 0 && is_hello(d) && hellos_dropped < 2) {
      ++hellos_dropped;
      return false;
    }
    return true;
  };
  ASSERT_TRUE(net.run_until([&] { return net.client().established(); }, 10'000'000'000));
  EXPECT_EQ(hellos_dropped, 2);
}

TEST(Connection, MessagesOfEverySize) {
  VirtualNet net(reserved_options(), reserved_options());
  const auto msgs = random_messages({0, 1, 1447, 1448, 1449, 12345, 0, 7, 3 << 20, 1}, 11);
  ASSERT_TRUE(transfer(net, msgs));
  const ChannelStats rx = net.server().stats();
  const ChannelStats tx = net.client().stats();
  EXPECT_EQ(rx.messages_received, msgs.size());
  EXPECT_EQ(tx.messages_sent, msgs.size());
  uint64_t total = 0;
  for (const auto& m : msgs) total += m.size();
  EXPECT_EQ(rx.bytes_received, total);
  EXPECT_EQ(tx.bytes_sent, total);
  EXPECT_EQ(tx.segments_retransmitted, 0u);
  EXPECT_GT(tx.srtt_ns, 0);
}

TEST(Connection, ManyMessagesInOrder) {
  VirtualNet net(reserved_options(), reserved_options());
  std::vector<size_t> sizes;
  for (size_t i = 0; i < 2000; ++i) sizes.push_back((i * 7919) % 5000);
  ASSERT_TRUE(transfer(net, random_messages(sizes, 5)));
}

TEST(Connection, BothDirections) {
  VirtualNet net(reserved_options(), reserved_options());
  ASSERT_TRUE(net.run_until([&] { return net.client().established(); }, 1'000'000'000));
  const auto up = random_bytes(100'000, 1);
  const auto down = random_bytes(200'000, 2);
  ASSERT_EQ(net.client().queue_message(up, 1), Status::kOk);
  ASSERT_EQ(net.server().queue_message(down, 2), Status::kOk);
  ASSERT_TRUE(net.run_until(
      [&] {
        return count_events(net.events(0), Event::Kind::kMessage) == 1 &&
               count_events(net.events(1), Event::Kind::kMessage) == 1;
      },
      5'000'000'000));
  for (const Event& e : net.events(0)) {
    if (e.kind == Event::Kind::kMessage) {
      EXPECT_TRUE(e.message == down);
    }
  }
  for (const Event& e : net.events(1)) {
    if (e.kind == Event::Kind::kMessage) {
      EXPECT_TRUE(e.message == up);
    }
  }
}

// Request/response: each reply carries the ACK of its request and each request the ACK of
// the previous reply, so a ping-pong sends (almost) no ACK datagrams of its own.
TEST(Connection, RepliesCarryTheirRequestsAck) {
  VirtualNet net(reserved_options(), reserved_options());
  LinkFaults delay;
  delay.delay_ns = 5'000'000;
  net.set_faults(0, delay);
  net.set_faults(1, delay);
  uint64_t ack_datagrams = 0;
  net.observe = [&](int /*side*/, uint32_t /*path*/, const std::vector<std::byte>& d) {
    if (!wire::is_data(d) && d.size() > 3 && d[3] == std::byte{uint8_t(wire::Type::kAck)}) {
      ++ack_datagrams;
    }
  };
  ASSERT_TRUE(net.run_until([&] { return net.client().established(); }, 1'000'000'000));
  constexpr int kRounds = 200;
  std::vector<std::vector<std::byte>> requests;
  std::vector<std::vector<std::byte>> replies;
  for (int i = 0; i < kRounds; ++i) {
    requests.push_back(random_bytes(64, 2 * i + 1));
    replies.push_back(random_bytes(64, 2 * i + 2));
  }
  ASSERT_EQ(net.client().queue_message(requests[0], 0), Status::kOk);
  size_t served = 0;
  size_t answered = 0;
  ASSERT_TRUE(net.run_until(
      [&] {
        // The server answers each request at once; the client sends the next on each reply.
        const auto& at_server = net.events(1);
        const auto& at_client = net.events(0);
        for (size_t n = count_events(at_server, Event::Kind::kMessage); served < n; ++served) {
          EXPECT_EQ(net.server().queue_message(replies[served], served), Status::kOk);
        }
        for (size_t n = count_events(at_client, Event::Kind::kMessage); answered < n;) {
          if (++answered < kRounds) {
            EXPECT_EQ(net.client().queue_message(requests[answered], answered), Status::kOk);
          }
        }
        return answered == kRounds;
      },
      60'000'000'000));
  size_t i = 0;
  for (const Event& e : net.events(1)) {
    if (e.kind == Event::Kind::kMessage) {
      EXPECT_TRUE(e.message == requests[i++]);
    }
  }
  i = 0;
  for (const Event& e : net.events(0)) {
    if (e.kind == Event::Kind::kMessage) {
      EXPECT_TRUE(e.message == replies[i++]);
    }
  }
  // 400 messages; without piggy-backing each would be answered by an ACK datagram.
  EXPECT_LE(ack_datagrams, 4u);
  EXPECT_GE(net.client().stats().acks_piggybacked + net.server().stats().acks_piggybacked,
            uint64_t{2 * kRounds - 4});
  EXPECT_EQ(net.client().stats().segments_retransmitted, 0u);
}

TEST(Connection, PeerDeathFailsWithTimeoutWithinPeerTimeout) {
  ChannelOptions o = reserved_options();
  o.peer_timeout_ns = 2'000'000'000;
  o.keepalive_interval_ns = 100'000'000;
  VirtualNet net(o, o);
  ASSERT_TRUE(transfer(net, random_messages({10'000}, 3)));
  // Idle for a while: keepalives keep it alive.
  net.run_until([] { return false; }, 3'000'000'000);
  EXPECT_FALSE(net.client().failed());
  const int64_t death_ns = net.now_ns();
  net.kill(1);
  const auto big = random_bytes(1 << 20, 4);
  ASSERT_EQ(net.client().queue_message(big, 9), Status::kOk);
  ASSERT_TRUE(net.run_until([&] { return net.client().failed(); }, 10'000'000'000));
  const int64_t took_ns = net.now_ns() - death_ns;
  EXPECT_LE(took_ns, o.peer_timeout_ns);
  EXPECT_GE(took_ns, o.peer_timeout_ns - 2 * o.keepalive_interval_ns);
  ASSERT_FALSE(net.events(0).empty());
  const Event& last = net.events(0).back();
  EXPECT_EQ(last.kind, Event::Kind::kFailed);
  EXPECT_EQ(last.error.code, ErrorCode::kTimeout);
  EXPECT_NE(last.error.message.find("ms"), std::string::npos) << last.error.message;
  EXPECT_EQ(net.client().queue_message(big, 10), Status::kClosed);
  EXPECT_EQ(net.client().next_wakeup_ns(), INT64_MAX);
}

TEST(Connection, UnansweredHandshakeFails) {
  ChannelOptions o = reserved_options();
  o.peer_timeout_ns = 1'000'000'000;
  VirtualNet net(o, o);
  net.kill(1);
  ASSERT_TRUE(net.run_until([&] { return net.client().failed(); }, 5'000'000'000));
  EXPECT_LE(net.now_ns() - 1'000'000'000, o.peer_timeout_ns);
  EXPECT_GE(net.datagrams(0, 0), 3u);  // HELLO retransmitted
  const Event& last = net.events(0).back();
  EXPECT_EQ(last.error.code, ErrorCode::kTimeout);
  EXPECT_NE(last.error.message.find("handshake"), std::string::npos) << last.error.message;
}

TEST(Connection, CloseReachesPeer) {
  VirtualNet net(reserved_options(), reserved_options());
  ASSERT_TRUE(transfer(net, random_messages({5000}, 1)));
  net.client().close(net.now_ns());
  EXPECT_EQ(net.client().queue_message({}, 1), Status::kClosed);
  ASSERT_TRUE(net.run_until(
      [&] { return count_events(net.events(1), Event::Kind::kClosed) == 1; }, 1'000'000'000));
  EXPECT_EQ(net.events(1).back().error.code, ErrorCode::kUnavailable);
}

TEST(Connection, OversizedMessageRejected) {
  ChannelOptions o = reserved_options();
  o.max_message_bytes = 1000;
  VirtualNet net(o, o);
  const auto m = random_bytes(1001, 1);
  EXPECT_EQ(net.client().queue_message(m, 1), Status::kInvalidArgument);
  EXPECT_EQ(net.client().queue_message(std::span(m).first(1000), 2), Status::kOk);
}

TEST(Connection, ReceiverRejectsMessageLargerThanItsLimit) {
  ChannelOptions small = reserved_options();
  small.max_message_bytes = 10'000;
  VirtualNet net(reserved_options(), small);
  const auto m = random_bytes(20'000, 1);
  ASSERT_EQ(net.client().queue_message(m, 1), Status::kOk);
  net.run_until([] { return false; }, 200'000'000);
  EXPECT_EQ(count_events(net.events(1), Event::Kind::kMessage), 0u);
  EXPECT_GT(net.server().stats().dropped_malformed, 0u);
}

}  // namespace
}  // namespace detwan::transport::proto::testing
