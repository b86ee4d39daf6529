// Delivery stays byte-exact under loss, reordering, duplication, corruption, truncation,
// replays and foreign datagrams; each bad datagram is counted under its reason.
#include <gtest/gtest.h>

#include <random>

#include "common/byte_order.h"

#include "tests/transport/proto/test_util.h"
#include "transport/proto/wire.h"

namespace detwan::transport::proto::testing {
namespace {

bool is_data(const std::vector<std::byte>& d) { return wire::is_data(d); }

std::vector<std::vector<std::byte>> workload(uint64_t seed) {
  return random_messages({0, 1, 777, 1448, 300'000, 2 << 20, 5, 64'000, 1 << 20}, seed);
}

class LossTest : public ::testing::TestWithParam<double> {};

TEST_P(LossTest, ByteExactUnderRandomLossBothWays) {
  VirtualNet net(reserved_options(), reserved_options(), 77);
  LinkFaults f;
  f.loss = GetParam();
  net.set_faults(0, f);
  net.set_faults(1, f);
  ASSERT_TRUE(transfer(net, workload(1)));
  const ChannelStats tx = net.client().stats();
  EXPECT_GT(tx.segments_retransmitted, 0u);
  EXPECT_GT(tx.loss_estimate, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Loss, LossTest, ::testing::Values(0.01, 0.10));

TEST(Faults, ReorderingAndDuplication) {
  VirtualNet net(reserved_options(), reserved_options(), 5);
  LinkFaults f;
  f.reorder = 0.1;
  f.reorder_extra_ns = 3'000'000;
  f.duplicate = 0.05;
  f.loss = 0.01;
  net.set_faults(0, f);
  net.set_faults(1, f);
  ASSERT_TRUE(transfer(net, workload(2)));
  EXPECT_GT(net.server().stats().dropped_duplicate, 0u);
}

TEST(Faults, CorruptDatagramsDroppedAndCounted) {
  VirtualNet net(reserved_options(), reserved_options(), 9);
  uint64_t flipped = 0;
  uint64_t n = 0;
  net.tamper = [&](int side, std::vector<std::byte>& d) {
    if (side == 0 && is_data(d) && d.size() > 100 && ++n % 17 == 0) {
      d[60 + (n % (d.size() - 60))] ^= std::byte{0x01};  // inside the payload
      ++flipped;
    }
    return true;
  };
  ASSERT_TRUE(transfer(net, workload(3)));
  EXPECT_GT(flipped, 10u);
  EXPECT_EQ(net.server().stats().dropped_corrupt, flipped);
}

TEST(Faults, HeaderFlipsAreMalformedOrCorrupt) {
  VirtualNet net(reserved_options(), reserved_options(), 9);
  uint64_t flipped = 0;
  uint64_t n = 0;
  net.tamper = [&](int side, std::vector<std::byte>& d) {
    if (side == 0 && is_data(d) && ++n % 13 == 0) {
      d[n % 60] ^= std::byte{0x80};
      ++flipped;
    }
    return true;
  };
  ASSERT_TRUE(transfer(net, workload(4)));
  const ChannelStats s = net.server().stats();
  EXPECT_GT(flipped, 10u);
  // A flipped connection id byte fails the CRC before the id is looked at.
  EXPECT_EQ(s.dropped_corrupt + s.dropped_malformed, flipped);
}

// A truncated control datagram is malformed (its lengths disagree); a truncated DATA, whose
// payload is the datagram's remainder, fails its CRC. Either way it is counted, never used.
TEST(Faults, TruncatedDatagramsDroppedAsMalformedOrCorrupt) {
  VirtualNet net(reserved_options(), reserved_options(), 3);
  uint64_t truncated = 0;
  uint64_t n = 0;
  net.tamper = [&](int side, std::vector<std::byte>& d) {
    if (side == 0 && ++n % 11 == 0) {
      d.resize(n % d.size());
      ++truncated;
    }
    return true;
  };
  ASSERT_TRUE(transfer(net, workload(5)));
  const ChannelStats s = net.server().stats();
  EXPECT_EQ(s.dropped_malformed + s.dropped_corrupt, truncated);
  EXPECT_GT(s.dropped_malformed, 0u);  // those cut inside a header
}

TEST(Faults, ReplayedSegmentsCountedAsDuplicates) {
  VirtualNet net(reserved_options(), reserved_options(), 3);
  std::vector<std::vector<std::byte>> captured;
  net.tamper = [&](int side, std::vector<std::byte>& d) {
    if (side == 0 && is_data(d) && captured.size() < 50) captured.push_back(d);
    return true;
  };
  ASSERT_TRUE(transfer(net, workload(6)));
  const uint64_t before = net.server().stats().dropped_duplicate;
  const size_t messages = net.events(1).size();
  for (const auto& d : captured) EXPECT_EQ(net.inject(1, 0, d), Status::kDropped);
  EXPECT_EQ(net.server().stats().dropped_duplicate, before + captured.size());
  net.run_until([] { return false; }, 100'000'000);
  EXPECT_EQ(count_events(net.events(1), Event::Kind::kMessage),
            count_events(std::vector<Event>(net.events(1).begin(),
                                            net.events(1).begin() + ptrdiff_t(messages)),
                         Event::Kind::kMessage));
}

TEST(Faults, ForeignConnectionIdDropped) {
  VirtualNet net(reserved_options(), reserved_options(), 3);
  ASSERT_TRUE(transfer(net, workload(7)));
  std::vector<std::byte> buf(1472);
  wire::Header h;
  h.type = wire::Type::kData;
  h.connection_id = net.client().connection_id() ^ 1;
  const auto payload = random_bytes(100, 1);
  wire::DataBody d;
  d.seq = 1'000'000;
  d.payload = payload;
  const size_t n = wire::encode_data(h, d, buf);
  EXPECT_EQ(net.inject(1, 0, std::span(buf).first(n)), Status::kDropped);
  EXPECT_EQ(net.server().stats().dropped_foreign, 1u);
}

TEST(Faults, DataBeyondWindowDropped) {
  VirtualNet net(reserved_options(), reserved_options(), 3);
  ASSERT_TRUE(transfer(net, workload(8)));
  std::vector<std::byte> buf(1472);
  wire::Header h;
  h.type = wire::Type::kData;
  h.connection_id = net.client().connection_id();
  const auto payload = random_bytes(100, 1);
  wire::DataBody d;
  d.seq = uint64_t{1} << 29;  // the receiver expands it 2^29 segments ahead of what it has
  d.payload = payload;
  const size_t n = wire::encode_data(h, d, buf);
  EXPECT_EQ(net.inject(1, 0, std::span(buf).first(n)), Status::kDropped);
  EXPECT_EQ(net.server().dropped_beyond_window(), 1u);
}

// Payload bytes of the client's full segments (what its HELLO told the server).
size_t client_unit(VirtualNet& net) {
  return net.client().max_datagram_bytes() - wire::kDataHeaderBytes;
}

TEST(Faults, InconsistentSegmentsRejected) {
  VirtualNet net(reserved_options(), reserved_options(), 3);
  ASSERT_TRUE(net.run_until([&] { return net.has_server() && net.client().established(); },
                            1'000'000'000));
  std::vector<std::byte> buf(1472);
  wire::Header h;
  h.type = wire::Type::kData;
  h.connection_id = net.client().connection_id();
  const size_t unit = client_unit(net);
  const auto full = random_bytes(unit + 1, 1);
  auto send = [&](uint64_t seq, uint32_t index, uint32_t last, size_t len) {
    wire::DataBody d;
    d.seq = seq;
    d.index = index;
    d.last_index = last;
    d.payload = std::span(full).first(len);
    const size_t n = wire::encode_data(h, d, buf);
    return net.inject(1, 0, std::span(buf).first(n));
  };
  EXPECT_EQ(send(0, 0, 2, unit), Status::kOk);             // message [0, 2], segment 0
  EXPECT_EQ(send(1, 1, 3, unit), Status::kMalformed);      // disagrees on the last index
  EXPECT_EQ(send(1, 0, 3, unit), Status::kMalformed);      // a message overlapping [0, 2]
  EXPECT_EQ(send(1, 1, 2, 100), Status::kMalformed);       // not the last, yet not full
  EXPECT_EQ(send(2, 2, 2, unit + 1), Status::kMalformed);  // the last, longer than a segment
  EXPECT_EQ(send(2, 5, 7, unit), Status::kMalformed);      // would start before seq 0
  EXPECT_EQ(send(4, 1, 1, 0), Status::kMalformed);         // an empty last segment of 2
  EXPECT_EQ(net.server().stats().dropped_malformed, 6u);
  EXPECT_EQ(count_events(net.events(1), Event::Kind::kMessage), 0u);
  // The message still completes from consistent segments, in any order.
  EXPECT_EQ(send(2, 2, 2, 10), Status::kOk);
  EXPECT_EQ(send(1, 1, 2, unit), Status::kOk);
  net.run_until([&] { return count_events(net.events(1), Event::Kind::kMessage) > 0; },
                100'000'000);
  ASSERT_EQ(count_events(net.events(1), Event::Kind::kMessage), 1u);
  for (const Event& e : net.events(1)) {
    if (e.kind == Event::Kind::kMessage) {
      EXPECT_EQ(e.message.size(), 2 * unit + 10);
    }
  }
}

// A peer naming huge messages cannot make the receiver allocate beyond max_reassembly_bytes:
// a new message's first segment beyond the budget is dropped (not allocated, not acknowledged)
// unless it is the next message to deliver; real traffic still completes, resent.
TEST(Faults, MessagesBeyondTheReassemblyBudgetWaitAndNothingIsAllocatedForThem) {
  ChannelOptions server = reserved_options();
  server.max_reassembly_bytes = 1'000'000;
  VirtualNet net(reserved_options(), server, 3);
  ASSERT_TRUE(net.run_until([&] { return net.has_server() && net.client().established(); },
                            1'000'000'000));
  std::vector<std::byte> buf(1472);
  wire::Header h;
  h.type = wire::Type::kData;
  h.connection_id = net.client().connection_id();
  const size_t unit = client_unit(net);
  const auto payload = random_bytes(unit, 1);
  auto send = [&](uint64_t seq, uint32_t last) {
    wire::DataBody d;
    d.seq = seq;
    d.last_index = last;
    d.payload = payload;
    const size_t n = wire::encode_data(h, d, buf);
    return net.inject(1, 0, std::span(buf).first(n));
  };
  // The next to deliver, about 900 kB: admitted even beyond the budget.
  const auto first_last = static_cast<uint32_t>(900'000 / unit);
  EXPECT_EQ(send(0, first_last), Status::kOk);
  const uint64_t held = (first_last + 1) * unit;
  // A later message of about 200 kB: beyond the budget, dropped.
  const uint64_t later = first_last + 1 + 10;
  EXPECT_EQ(send(later, static_cast<uint32_t>(200'000 / unit)), Status::kDropped);
  // One that fits what is left.
  EXPECT_EQ(send(later, static_cast<uint32_t>((1'000'000 - held) / unit - 1)), Status::kOk);
  EXPECT_EQ(net.server().stats().dropped_memory, 1u);
  EXPECT_EQ(net.server().stats().dropped_malformed, 0u);
}

// Two paths, one 5 ms longer: a message's first segments arrive before the previous message
// is complete, so several are in progress at once.
TEST(Faults, RealTrafficCompletesExactlyThroughASmallReassemblyBudget) {
  ChannelOptions client = reserved_options();
  client.paths = {client.paths[0], client.paths[0]};
  ChannelOptions server = client;
  server.max_reassembly_bytes = 300'000;
  VirtualNet net(client, server, 4);
  LinkFaults slow;
  slow.delay_ns = 6'000'000;
  net.set_faults(0, slow, 1);
  net.set_faults(1, slow, 1);
  ASSERT_TRUE(transfer(net, random_messages({250'000, 250'000, 250'000, 1'000'000, 10}, 6)));
  EXPECT_GT(net.server().stats().dropped_memory, 0u);
}

// A receiver that stops reading holds at most its budget of delivered-but-unread messages: the
// sender is held back (segments beyond it dropped, counted dropped_memory, resent), and once
// the receiver reads again everything arrives, exactly.
TEST(Faults, AReceiverThatDoesNotReadHoldsAtMostItsBudget) {
  ChannelOptions server = reserved_options();
  server.max_reassembly_bytes = 1'000'000;
  VirtualNet net(reserved_options(), server, 5);
  ASSERT_TRUE(net.run_until([&] { return net.has_server() && net.client().established(); },
                            1'000'000'000));
  net.set_reading(1, false);
  const auto messages = random_messages({200'000, 200'000, 200'000, 200'000, 200'000, 200'000,
                                         200'000, 200'000},
                                        7);
  for (size_t i = 0; i < messages.size(); ++i) {
    ASSERT_EQ(net.client().queue_message(messages[i], i), Status::kOk);
  }
  uint64_t most_unread = 0;
  (void)net.run_until(
      [&] {
        most_unread = std::max(most_unread, net.server().unread_bytes());
        return false;
      },
      2'000'000'000);
  // Not everything could be delivered while nobody read; never more than the budget held.
  EXPECT_LE(most_unread, 1'000'000u);
  EXPECT_LT(count_events(net.events(1), Event::Kind::kMessage), messages.size());
  EXPECT_GT(net.server().stats().dropped_memory, 0u);
  net.set_reading(1, true);
  ASSERT_TRUE(net.run_until(
      [&] { return count_events(net.events(1), Event::Kind::kMessage) == messages.size(); },
      20'000'000'000));
  size_t i = 0;
  for (const Event& e : net.events(1)) {
    if (e.kind != Event::Kind::kMessage) continue;
    EXPECT_EQ(e.message, messages[i]) << i;
    ++i;
  }
}

// Datagrams with a valid header and CRC but random bodies (what a hostile peer can send):
// every one is handled without crashing and each rejected one is counted.
TEST(Faults, RandomBodiesWithValidCrc) {
  VirtualNet net(reserved_options(), reserved_options(), 3);
  ASSERT_TRUE(transfer(net, workload(9)));
  std::mt19937_64 rng(42);
  for (int side = 0; side < 2; ++side) {
    const ChannelStats before = net.side(side)->stats();
    uint64_t rejected = 0;
    const int kCount = 20000;
    for (int i = 0; i < kCount; ++i) {
      std::vector<std::byte> d(wire::kHeaderBytes + rng() % 400);
      for (auto& b : d) b = static_cast<std::byte>(rng());
      wire::Header h;
      h.type = static_cast<wire::Type>(1 + rng() % 7);
      if (h.type == wire::Type::kHello || h.type == wire::Type::kClose) h.type = wire::Type::kAck;
      h.connection_id = net.client().connection_id();
      size_t crc_at = wire::kCrcOffset;
      if (h.type == wire::Type::kData) {
        // The short form: a plausible seq and indices sometimes, so the body reaches
        // reassembly; random payload lengths.
        wire::DataBody b;
        b.seq = net.side(1 - side)->stats().segments_sent + rng() % 64;
        b.last_index = static_cast<uint32_t>(rng() % 4);
        b.index = static_cast<uint32_t>(rng() % (b.last_index + 1));
        const std::vector<std::byte> payload(d.begin() + wire::kDataHeaderBytes, d.end());
        b.payload = payload;
        if (rng() % 2 == 0) {
          if (wire::encode_data(h, b, d) == 0) continue;
        } else {
          d[0] = static_cast<std::byte>(wire::kDataMarker);
          common::store_be32(d.data() + 1, static_cast<uint32_t>(h.connection_id));
        }
        crc_at = wire::kShortCrcOffset;
      } else {
        if (wire::encode_empty(h, d) == 0) continue;
        if (h.type == wire::Type::kKeepalive) d.resize(wire::kHeaderBytes);
      }
      common::store_be32(d.data() + crc_at, 0);
      common::store_be32(d.data() + crc_at, wire::crc32c(d));
      if (net.inject(side, 0, d) != Status::kOk) ++rejected;
    }
    const ChannelStats after = net.side(side)->stats();
    EXPECT_EQ(after.datagrams_received - before.datagrams_received, uint64_t{kCount});
    EXPECT_EQ(after.dropped_corrupt, before.dropped_corrupt);  // CRCs were valid
    const uint64_t counted = (after.dropped_malformed - before.dropped_malformed) +
                             (after.dropped_duplicate - before.dropped_duplicate) +
                             (net.side(side)->dropped_beyond_window());
    EXPECT_EQ(counted, rejected);
    EXPECT_GT(rejected, uint64_t{kCount} / 2);
  }
}

}  // namespace
}  // namespace detwan::transport::proto::testing
