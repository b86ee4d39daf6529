// Writes the seed corpora of the fuzz targets transport, perf, bootstrap, agent_api and config
// (the wire target has wire_corpus_gen). Run by hand after a format change:
//   build/tests/fuzz/fuzz_seed_gen tests/fuzz/corpus [REPO_ROOT]
// REPO_ROOT (default ".") is where docs/examples/gateway.yaml is read from. Existing seed-*
// files are overwritten; other files (crash inputs added after a fix) are kept.
//
// The seeds are real traffic and real documents: a transport client's datagrams recorded while
// it talks to a server (handshake, a small, a multi-segment and an oversize message, FEC), every
// perf and STAMP packet kind, bootstrap frames from the encoders, API request sequences that
// reserve, commit, provision, modify, rotate and terminate, and the documented gateway
// configuration.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "collectives/comm/bootstrap_codec.h"
#include "collectives/comm/bootstrap_keys.h"
#include "tools/perf/perf_wire.h"
#include "tools/perf/spec_json.h"
#include "tools/perf/stamp_wire.h"
#include "transport/proto/connection.h"

namespace fs = std::filesystem;

namespace {

fs::path g_out;

void write_seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  std::ofstream(dir / ("seed-" + name), std::ios::binary) << bytes;
}

std::string with_selector(uint8_t selector, std::string_view body) {
  std::string s(1, static_cast<char>(selector));
  s += body;
  return s;
}

// ---- transport: a client's datagrams to a server, as the target's records ----
void transport_seeds() {
  using namespace detwan::transport::proto;  // NOLINT
  struct Scenario {
    const char* name;
    std::vector<size_t> messages;
    bool fec;
    bool two_paths;
  };
  const Scenario scenarios[] = {
      {"handshake-small", {100}, false, false},
      {"multisegment", {5000, 1}, false, true},
      {"fec", {20000}, true, false},
      {"oversize", {70000, 10}, false, false},
  };
  for (const Scenario& sc : scenarios) {
    auto options = [&](Role role) {
      ConnectionConfig c;
      c.role = role;
      c.connection_id = 0x0123456789ABCDEFull;
      c.options.paths.resize(sc.two_paths ? 2 : 1);
      for (auto& p : c.options.paths) p.rate_bps = 100'000'000;
      c.options.fec.enabled = sc.fec;
      c.options.fec.data_segments = 4;
      return c;
    };
    int64_t now_ns = 1'000'000'000;
    Connection client(options(Role::kClient), now_ns);
    Connection server(options(Role::kServer), now_ns);
    std::vector<std::vector<std::byte>> payloads;
    for (size_t i = 0; i < sc.messages.size(); ++i) {
      payloads.emplace_back(sc.messages[i], std::byte{static_cast<uint8_t>(i + 1)});
      (void)client.queue_message(payloads.back(), i + 1);
    }
    std::string records;
    std::vector<std::byte> buf(std::max(client.max_datagram_bytes(), server.max_datagram_bytes()));
    int64_t last_ns = now_ns;
    for (int step = 0; step < 400 && records.size() < 60000; ++step) {
      for (;;) {
        const Transmit t = client.poll_transmit(now_ns, buf);
        if (t.size_bytes == 0) break;
        const int64_t delta_ms = std::min<int64_t>(15, (now_ns - last_ns) / 1'000'000);
        last_ns = now_ns;
        records += static_cast<char>((delta_ms << 4) | (t.path << 2));
        records += static_cast<char>(t.size_bytes >> 8);
        records += static_cast<char>(t.size_bytes & 0xFF);
        records.append(reinterpret_cast<const char*>(buf.data()), t.size_bytes);
        (void)server.on_datagram(t.path, std::span(buf.data(), t.size_bytes), now_ns);
      }
      for (;;) {
        const Transmit t = server.poll_transmit(now_ns, buf);
        if (t.size_bytes == 0) break;
        (void)client.on_datagram(t.path, std::span(buf.data(), t.size_bytes), now_ns);
      }
      while (server.poll_event()) {
      }
      while (client.poll_event()) {
      }
      now_ns += 1'000'000;
    }
    write_seed("transport", sc.name, records);
  }
}

// ---- perf: test packets, STAMP packets, the control hello ----
void perf_seeds() {
  using namespace detwan::perf;  // NOLINT
  const Kind kinds[] = {Kind::kHello, Kind::kHelloAck, Kind::kData, Kind::kSyncRequest,
                        Kind::kSyncReply, Kind::kFin};
  for (Kind k : kinds) {
    Packet p;
    p.kind = k;
    p.session = 77;
    p.seq = 12345;
    p.t_a = 1'700'000'000'000'000'000;
    p.t_b = k == Kind::kSyncReply ? p.t_a + 1000 : 0;
    p.t_c = k == Kind::kSyncReply ? p.t_a + 2000 : 0;
    std::string buf(k == Kind::kData ? 200 : kHeaderBytes, '\0');
    const size_t n = encode(p, reinterpret_cast<uint8_t*>(buf.data()), buf.size(), buf.size());
    write_seed("perf", "packet-" + std::to_string(static_cast<int>(k)), with_selector(0, buf.substr(0, n)));
  }
  stamp::SenderPacket s;
  s.seq = 9;
  s.timestamp = stamp::ntp_from_ns(1'700'000'000'000'000'000);
  s.error_estimate = stamp::encode_error_estimate(stamp::make_error_estimate(1000, true, false));
  std::string sender(stamp::kBaseBytes, '\0');
  (void)stamp::encode_sender(s, reinterpret_cast<uint8_t*>(sender.data()), sender.size(), sender.size());
  write_seed("perf", "stamp-sender", with_selector(1, sender));
  std::string with_cos = sender + std::string(8, '\0');
  (void)stamp::write_cos_tlv(reinterpret_cast<uint8_t*>(with_cos.data()), with_cos.size(),
                             stamp::kBaseBytes, 46);
  write_seed("perf", "stamp-sender-cos", with_selector(1, with_cos));
  std::string unknown_tlv = sender + std::string("\x00\x07\x00\x04" "abcd" "\x00\x09\x00\x10", 12);
  write_seed("perf", "stamp-sender-tlvs", with_selector(1, unknown_tlv));
  write_seed("perf", "twamp-light", with_selector(1, sender.substr(0, stamp::kTwampLightSenderMinBytes)));
  stamp::ReflectorPacket r;
  r.seq = 4;
  r.sender_seq = 9;
  r.timestamp = s.timestamp + 5;
  r.receive_timestamp = s.timestamp + 3;
  r.sender_timestamp = s.timestamp;
  std::string reflector(stamp::kBaseBytes, '\0');
  (void)stamp::encode_reflector_base(r, reinterpret_cast<uint8_t*>(reflector.data()), reflector.size());
  write_seed("perf", "stamp-reflector", with_selector(1, reflector));

  TestSpec spec;
  boost::json::object hello{{"type", "hello"}, {"version", 1}, {"spec", spec_to_json(spec)}};
  write_seed("perf", "hello", with_selector(2, boost::json::serialize(hello)));
  spec.mode = Mode::kThroughput;
  spec.bitrate_bps = 100'000'000;
  spec.size_bytes = 1400;
  spec.schedule = ScheduleKind::kPoisson;
  hello["spec"] = spec_to_json(spec);
  write_seed("perf", "hello-throughput", with_selector(2, boost::json::serialize(hello)));
}

// ---- bootstrap: handshake messages, join and answer payloads, sealed frames, specs ----
void bootstrap_seeds() {
  namespace b = detwan::collectives::bootstrap;
  b::Join join;
  join.rank = 1;
  join.nranks = 4;
  join.blob = "a|10.20.1.2:40000|10.20.1.2:40001";
  write_seed("bootstrap", "join", with_selector(0, b::encode_join(join)));
  join.blob = "";
  join.rank = 0;
  write_seed("bootstrap", "join-empty", with_selector(0, b::encode_join(join)));
  // An answer's first byte is the rank count the decoder is asked for.
  write_seed("bootstrap", "answer-ok",
             with_selector(1, std::string(1, '\x04') +
                                  b::encode_answer_ok({"blob-0", "blob-1", "", "blob-3"})));
  detwan::common::Error error{detwan::common::ErrorCode::kInvalidArgument, "rank 3 twice"};
  write_seed("bootstrap", "answer-error",
             with_selector(1, std::string(1, '\x02') + b::encode_answer_error(error)));
  write_seed("bootstrap", "spec-tcp",
             with_selector(2, "tcp://10.0.0.1:29500#00112233445566778899aabbccddeeff"));
  write_seed("bootstrap", "spec-tcp6", with_selector(2, "tcp://[fd00::1]:29500"));
  write_seed("bootstrap", "spec-file",
             with_selector(2, "file:///tmp/detwan-rdv#abcdef0123456789abcdef0123456789"));
  b::Nonce nonce{};
  for (size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<std::byte>(i);
  write_seed("bootstrap", "hello", with_selector(3, b::encode_hello(nonce)));
  b::Challenge challenge;
  challenge.nonce = nonce;
  challenge.proof[0] = std::byte{0x5a};
  write_seed("bootstrap", "challenge", with_selector(3, b::encode_challenge(challenge)));
  write_seed("bootstrap", "proof", with_selector(3, b::encode_proof(challenge.proof)));
  // Sealed with the target's key (bytes i * 7 + 1), counter 0: opens in check_sealed.
  detwan::collectives::crypto::Key key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::byte>(i * 7 + 1);
  auto sealed = b::seal_frame(key, 0, b::encode_join(join));
  if (sealed) write_seed("bootstrap", "sealed-join", with_selector(4, sealed->substr(4)));
}

// ---- agent_api: request sequences ----
std::string request(uint8_t method, uint8_t route, uint8_t flags, std::string_view body) {
  std::string r;
  r += static_cast<char>(method);
  r += static_cast<char>(route);
  r += static_cast<char>(flags);
  r += body;
  return r;
}

void agent_api_seeds() {
  // Methods: 0 GET, 1 POST, 2 PATCH, 3 DELETE. Routes: the table in agent_api_fuzz.cc.
  const std::string reserve =
      R"({"src":"a","dst":"b","min_bandwidth_bps":50000000,"max_latency_ns":40000000,)"
      R"("duration_ns":600000000000})";
  const std::string nul(1, '\0');
  write_seed("agent_api", "lifecycle",
             request(1, 0, 0, reserve) + nul + request(0, 1, 0, "") + nul +
                 request(1, 3, 0, "") + nul + request(1, 4, 1, "") + nul +
                 request(2, 1, 0, R"({"min_bandwidth_bps":60000000})") + nul +
                 request(1, 6, 1, "") + nul + request(3, 1, 1, "") + nul + request(0, 10, 0, ""));
  write_seed("agent_api", "provision-protected",
             request(1, 0, 0,
                     R"({"src":"b","dst":"a","min_bandwidth_bps":2000000,"asap":true,)"
                     R"("duration_ns":60000000000,"protect":"1+1","provision":true})") +
                 nul + request(0, 13, 1, "") + nul + request(1, 7, 0, ""));
  write_seed("agent_api", "encrypted-rotate",
             request(1, 0, 0,
                     R"({"src":"a","dst":"b","min_bandwidth_bps":10000000,)"
                     R"("duration_ns":60000000000,"encrypt":"chacha20-poly1305","provision":true})") +
                 nul + request(1, 9, 1, "") + nul + request(1, 9, 1, "") + nul + request(1, 9, 1, ""));
  write_seed("agent_api", "paths",
             request(1, 12, 0, R"({"src":"a","dst":"b","min_bandwidth_bps":10000000,"k":2})"));
  write_seed("agent_api", "held-expires",
             request(1, 0, 0,
                     R"({"src":"a","dst":"b","min_bandwidth_bps":150000000,)"
                     R"("start_unix_ns":1800000100000000000,"end_unix_ns":1800000200000000000,)"
                     R"("client_request_id":"x"})") +
                 nul + request(1, 0, 1, R"({"src":"a","dst":"b","min_bandwidth_bps":150000000,"duration_ns":1000000000000})") +
                 nul + request(0, 14, 1, "") + nul + request(0, 15, 1, "") + nul + request(0, 11, 1, ""));
  write_seed("agent_api", "custom-path", request(0, 255, 0, "/v1/reservations/r-1?wait=true\n"));
  // Routes 16-18: pools and plans (co-scheduling).
  write_seed("agent_api", "pools-plan",
             request(1, 16, 0, R"({"name":"a-cpu","site":"a","kind":"cpu","ranks":2})") + nul +
                 request(1, 16, 0,
                         R"({"name":"b-cpu","site":"b","kind":"cpu","ranks":2,"reference":)"
                         R"({"step_ns":1000000000,"steps":5,"gradient_bytes":1000000,)"
                         R"("backward_ns":600000000}})") +
                 nul + request(0, 17, 0, "") + nul +
                 request(1, 18, 0,
                         R"({"gradient_bytes":4000000,"ranks":4,"step_compute_ns":2000000000,)"
                         R"("target_step_ns":2500000000,"reserve":true})") +
                 nul + request(1, 18, 0, R"({"gradient_bytes":1000000,"ranks":3,"placement":[{"site":"a","ranks":2},{"site":"b","ranks":1}]})") +
                 nul +
                 request(1, 18, 0,
                         R"({"gradient_bytes":40000000,"ranks":4,"bucket_bytes":2000000,)"
                         R"("first_bucket_bytes":1048576,"min_efficiency":0.8})") +
                 nul + request(3, 17, 1, "") + nul + request(0, 16, 0, ""));
}

// ---- config: gateway YAML, tunnel items, topology YAML ----
void config_seeds(const fs::path& repo) {
  std::ifstream in(repo / "docs" / "examples" / "gateway.yaml");
  std::stringstream example;
  example << in.rdbuf();
  if (example.str().empty()) {
    std::fprintf(stderr, "fuzz_seed_gen: %s/docs/examples/gateway.yaml not found\n",
                 repo.c_str());
    std::exit(1);
  }
  write_seed("config", "gateway-example", with_selector(0, example.str()));
  write_seed("config", "gateway-auth", with_selector(0, R"(gateway: {name: gw}
wan_ports:
  - {name: wan-b, local: 10.101.12.1:4789, line_rate: 1gbit, cycle: 1ms, slots: 100}
peers:
  - {name: site-b, wan_port: wan-b, endpoint: 10.101.12.2:4789, clock_offset: auto}
tunnels:
  - id: 7
    peer: site-b
    rate: 100mbit
    slots: 0-19
    match: {dst: [10.20.2.0/24]}
    auth:
      cipher: aes-256-gcm
      keys:
        - {id: 1, secret: 000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f}
        - {id: 2, secret: 0f0e0d0c0b0a09080706050403020100000102030405060708090a0b0c0d0e0f}
      tx_key: 2
)"));
  write_seed("config", "tunnel-item",
             with_selector(1, R"({"id":1001,"peer":"site-b","auth":"none","owner":"agent:lab","rate":"10mbit",)"
                              R"("slots":[50,51,52],"burst":"64kb","over_rate":"best-effort",)"
                              R"("bound":"4ms","late":"drop","max_hold":"1s","replay_window":128,)"
                              R"("match":{"dst":["10.30.0.0/16"],"udp_ports":["5201-5210",9000]}})"));
  write_seed("config", "topology", with_selector(2, R"(domain: lab
agent: {name: lab, journal: /tmp/detwan-fuzz-agent.db, hold_timeout: 30s}
sites:
  - {name: a, gateway: gw-a, tunnel_prefixes: [10.20.1.0/24]}
  - {name: b, gateway: gw-b, tunnel_prefixes: [10.20.2.0/24]}
gateways:
  - {name: gw-a, site: a, admin_socket: /run/gw-a,
     ports: [{name: ab1, link: ab1}, {name: ar, link: ar}],
     peers: [{name: b, port: ab1, gateway: gw-b}]}
  - {name: gw-b, site: b, admin_socket: /run/gw-b, ports: [{name: ab1, link: ab1}],
     peers: [{name: a, port: ab1, gateway: gw-a}]}
nodes: [r]
links:
  - {name: ab1, ends: [a, b], capacity: 200mbit, delay: 5ms, jitter: 500us, guard: 2us}
  - {name: ar, ends: [a, r], capacity: 1gbit, delay: 20ms, guard: 2us}
)"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s CORPUS_ROOT [REPO_ROOT]\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  transport_seeds();
  perf_seeds();
  bootstrap_seeds();
  agent_api_seeds();
  config_seeds(argc == 3 ? fs::path(argv[2]) : fs::path("."));
  std::printf("seeds written under %s\n", argv[1]);
  return 0;
}
