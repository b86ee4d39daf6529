// The admin socket and the write requests of the control channel: the socket file's mode and
// owner, peers refused by uid (SO_PEERCRED) before their request is read, writes refused on the
// read-only socket, every malformed apply answered with an error naming the item and field and
// changing nothing, a well-formed one applied, the larger request bound of the admin socket.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>

#include "dataplane/gw/control_server.h"
#include "dataplane/gw/engine.h"
#include "tests/dataplane/uring/uring_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using ::testing::HasSubstr;
using uring::testing::loopback;
using uring::testing::unique_socket_name;

constexpr int64_t kStartNs = 1'700'000'000'000'000'000;

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("detwan-admin-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
    std::filesystem::permissions(path_, std::filesystem::perms(0755));
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

ControlServerOptions admin_options(uint32_t mode = 0600) {
  ControlServerOptions options;
  options.admin = true;
  options.mode = mode;
  options.max_request_bytes = ControlServer::kMaxAdminRequestBytes;
  return options;
}

// Polls `server` (with `respond`) until `done` is ready, as the datapath does.
template <typename T>
T serve_until(ControlServer& server, std::future<T>& done,
              const ControlServer::Responder& respond) {
  while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    pollfd descriptor{server.fd(), POLLIN, 0};
    (void)::poll(&descriptor, 1, 1);
    server.poll_st(0, respond);
  }
  return done.get();
}

TEST(AdminSocket, FileGetsItsModeBeforeListeningAndTheGatewaysOwner) {
  TempDir dir;
  for (const uint32_t mode : {0600u, 0660u}) {
    const std::string path = dir.file("admin-" + std::to_string(mode) + ".sock");
    auto server = ControlServer::start(path, admin_options(mode));
    ASSERT_TRUE(server) << server.error().message;
    EXPECT_TRUE((*server)->admin());
    struct stat info {};
    ASSERT_EQ(::lstat(path.c_str(), &info), 0);
    EXPECT_TRUE(S_ISSOCK(info.st_mode));
    EXPECT_EQ(info.st_mode & 07777, mode);
    EXPECT_EQ(info.st_uid, ::geteuid());
  }
}

// The kernel behaviour bind_admin_socket relies on: fchmod() on an unbound AF_UNIX socket sets
// the mode bind() gives the file (minus the umask), so the file is never wider than asked.
TEST(AdminSocket, KernelCreatesTheFileWithTheDescriptorsMode) {
  TempDir dir;
  const std::string path = dir.file("probe.sock");
  const mode_t saved = ::umask(0022);
  for (const mode_t mode : {mode_t{0600}, mode_t{0660}, mode_t{0666}}) {
    common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::fchmod(fd.get(), mode), 0) << std::strerror(errno);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    ::unlink(path.c_str());
    ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    struct stat info {};
    ASSERT_EQ(::lstat(path.c_str(), &info), 0);  // right after bind: never wider than asked
    EXPECT_EQ(info.st_mode & 07777, mode & ~mode_t{0022}) << std::oct << mode;
  }
  ::umask(saved);
}

// Whatever the umask, the admin socket ends with exactly its mode (restored in the private
// directory, not by chmod on the final path), and the private directory is gone.
TEST(AdminSocket, ModeIsSetOnTheDescriptorWhateverTheUmask) {
  TempDir dir;
  const mode_t saved = ::umask(0);
  for (const mode_t umask_bits : {mode_t{0}, mode_t{0022}, mode_t{0077}}) {
    ::umask(umask_bits);
    for (const uint32_t mode : {0600u, 0660u, 0666u}) {
      const std::string path = dir.file("admin.sock");
      auto server = ControlServer::start(path, admin_options(mode));
      ASSERT_TRUE(server) << server.error().message;
      struct stat info {};
      ASSERT_EQ(::lstat(path.c_str(), &info), 0);
      EXPECT_TRUE(S_ISSOCK(info.st_mode));
      EXPECT_EQ(info.st_mode & 07777, mode) << "umask " << std::oct << umask_bits;
      // It answers at its final path (renamed after bind).
      std::promise<common::Result<std::string>> asked;
      auto answer = asked.get_future();
      std::thread client([&] { asked.set_value(control_request(path, R"({"cmd":"stats"})")); });
      const auto got = serve_until(**server, answer, [](std::string_view) {
        return std::string("{\"answered\":true}");
      });
      client.join();
      ASSERT_TRUE(got) << got.error().message;
      EXPECT_EQ(*got, "{\"answered\":true}");
      server->reset();  // unlinks the file
    }
  }
  ::umask(saved);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(dir.file("")))) {
    ++entries;
  }
  EXPECT_EQ(entries, 0u);  // no private directory left behind
}

TEST(AdminSocket, OnlyAbsolutePathsAreAdminSockets) {
  auto abstract = ControlServer::start("@detwan-admin", admin_options());
  ASSERT_FALSE(abstract);
  EXPECT_EQ(abstract.error().code, common::ErrorCode::kInvalidArgument);
  EXPECT_THAT(abstract.error().message,
              HasSubstr("admin socket '@detwan-admin': must be a filesystem path starting with "
                        "'/': an abstract socket has no file permissions"));
  auto relative = ControlServer::start("admin.sock", admin_options());
  ASSERT_FALSE(relative);
  EXPECT_THAT(relative.error().message, HasSubstr("must be an absolute path"));
}

// A child process that drops to uid 65534 and asks `path` for stats while `poll` serves the
// socket: the answer it got, or why it got none.
std::string ask_as_nobody(const std::string& path, const std::function<void()>& poll) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string answer;
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) {
      answer = std::string("setuid: ") + std::strerror(errno);
    } else {
      auto result = control_request(path, R"({"cmd":"stats"})", 10'000);
      answer = result ? *result : "client error: " + result.error().message;
    }
    (void)!::write(pipe_fds[1], answer.data(), answer.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  auto done = std::async(std::launch::async, [&] {
    std::string out;
    char buffer[512];
    for (ssize_t got; (got = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) {
      out.append(buffer, static_cast<size_t>(got));
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return out;
  });
  while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) poll();
  ::close(pipe_fds[0]);
  return done.get();
}

std::string ask_as_nobody(const std::string& path, ControlServer& server, int* responder_calls) {
  return ask_as_nobody(path, [&] {
    pollfd descriptor{server.fd(), POLLIN, 0};
    (void)::poll(&descriptor, 1, 1);
    server.poll_st(0, [&](std::string_view) {
      ++*responder_calls;
      return std::string("{\"answered\":true}");
    });
  });
}

TEST(AdminSocket, APeerWithAnotherUidIsRefusedBeforeItsRequestIsRead) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root: the test forks a client that setuid()s to 65534 (CI runs as root)";
  }
  TempDir dir;
  const std::string path = dir.file("admin.sock");
  // 0666: the file lets everyone connect, so only the uid check stands in the way.
  auto server = ControlServer::start(path, admin_options(0666));
  ASSERT_TRUE(server) << server.error().message;
  int calls = 0;
  EXPECT_EQ(ask_as_nobody(path, **server, &calls),
            "{\"error\":\"uid 65534 may not use the admin socket " + path + " (allowed: 0)\"}");
  EXPECT_EQ(calls, 0);  // never read, never answered from the request
  EXPECT_EQ((*server)->refused_peers(), 1u);

  // Listed in admin_uids: served.
  server->reset();
  ControlServerOptions options = admin_options(0666);
  options.allowed_uids = {65534};
  server = ControlServer::start(path, options);
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_EQ(ask_as_nobody(path, **server, &calls), "{\"answered\":true}");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ((*server)->refused_peers(), 0u);

  // With the default mode 0600 the kernel already refuses the connection.
  server->reset();
  server = ControlServer::start(path, admin_options(0600));
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_THAT(ask_as_nobody(path, **server, &calls), HasSubstr("Permission denied"));
  EXPECT_EQ(calls, 1);
}

TEST(AdminSocket, RequestsUpToTheAdminBoundAreReadLongerOnesRefused) {
  TempDir dir;
  const std::string path = dir.file("admin.sock");
  auto server = ControlServer::start(path, admin_options());
  ASSERT_TRUE(server) << server.error().message;
  const auto length = [](std::string_view request) { return std::to_string(request.size()); };
  const std::string large(100 * 1024, 'a');  // above the read-only bound of 4096
  auto answer = std::async(std::launch::async, [&] { return control_request(path, large); });
  auto result = serve_until(**server, answer, length);
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(*result, std::to_string(large.size()));
  const std::string huge(ControlServer::kMaxAdminRequestBytes + 1, 'a');
  answer = std::async(std::launch::async, [&] { return control_request(path, huge, 20'000); });
  result = serve_until(**server, answer, length);
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(*result, "{\"error\":\"request longer than 262144 bytes\"}");
}

// ---- write requests, answered from a real engine ----

class WriteRequests : public ::testing::Test {
 protected:
  void SetUp() override {
    // Tunnel 7 owns slots 0-49 of wan1's 100; a new tunnel may take some of the rest.
    config_ = uring::testing::site_config("site-a", "site-b", loopback(4789), loopback(4790),
                                          100'000'000, 50);
    auto engine = Engine::create(config_, kStartNs);
    ASSERT_TRUE(engine) << engine.error().message;
    engine_ = std::move(*engine);
  }
  std::string write(std::string_view request) {
    return answer_control_request(*engine_, request, kStartNs + 1'000'000, admin_);
  }
  // The error of a refused write; the engine must be unchanged and the answer carry its
  // generation.
  std::string refusal(std::string_view request) {
    const std::string before = engine_->tunnels_json();
    const boost::json::value answer = boost::json::parse(write(request));
    EXPECT_EQ(engine_->tunnels_json(), before) << request;
    EXPECT_EQ(answer.at("generation").to_number<uint64_t>(), engine_->generation()) << request;
    return std::string(answer.at("error").as_string());
  }
  static constexpr const char* kTunnel =
      R"({"id":1001,"peer":"site-b","auth":"none","owner":"agent:t","rate":"10mbit","slots":"60-69"})";

  GatewayConfig config_;
  std::unique_ptr<Engine> engine_;
  const ControlChannel admin_{true, "/run/admin.sock", "/run/admin.sock"};
};

TEST_F(WriteRequests, TheReadOnlySocketRefusesWritesNamingTheAdminSocket) {
  const ControlChannel read_only{false, "@detwan-gw", "/run/detwan/admin.sock"};
  for (const char* command : {"apply", "add_tunnel", "modify_tunnel", "remove_tunnel"}) {
    const std::string request = std::string(R"({"cmd":")") + command + R"(","add":[]})";
    const auto answer =
        boost::json::parse(answer_control_request(*engine_, request, kStartNs, read_only));
    EXPECT_EQ(answer.at("error").as_string(),
              std::string("'") + command +
                  "' changes the gateway: send it to the admin socket /run/detwan/admin.sock "
                  "(gateway.admin_socket), not @detwan-gw");
  }
  const auto none = boost::json::parse(answer_control_request(
      *engine_, R"({"cmd":"apply"})", kStartNs, ControlChannel{false, "@gw", ""}));
  EXPECT_EQ(none.at("error").as_string(),
            "'apply' changes the gateway: send it to the admin socket (gateway.admin_socket), "
            "not @gw");
  EXPECT_EQ(engine_->generation(), 0u);
  EXPECT_EQ(engine_->control_io().refused_writes, 5u);
  // Reads work on both.
  EXPECT_EQ(answer_control_request(*engine_, R"({"cmd":"tunnels"})", kStartNs, read_only),
            engine_->tunnels_json());
}

TEST_F(WriteRequests, MalformedAppliesAreRefusedNamingTheItemAndField) {
  EXPECT_THAT(write(R"({"cmd":"apply","add":[)"), HasSubstr("request is not JSON"));
  EXPECT_EQ(refusal(R"({"cmd":"apply","add":[],"replace":[]})"),
            "unknown field \"replace\" in apply (allowed: cmd, if_generation, add, modify, "
            "remove)");
  EXPECT_EQ(refusal(R"({"cmd":"apply"})"),
            "apply changes nothing: give \"add\", \"modify\" or \"remove\"");
  EXPECT_EQ(refusal(R"({"cmd":"apply","add":{"id":1}})"), "\"add\" must be a list of tunnels");
  EXPECT_THAT(refusal(R"({"cmd":"apply","add":[{"id":1001,"peer":"site-b","auth":"none","rate":"10mbit",)"
                      R"("slots":"60-69","colour":"red"}]})"),
              HasSubstr("add[0] (tunnel 1001): field 'colour': unknown key 'colour'"));
  EXPECT_EQ(refusal(R"({"cmd":"apply","add":[{"id":1001,"peer":"site-b","auth":"none","rate":"10mbit",)"
                    R"("slots":"60-69,120"}]})"),
            "add[0] (tunnel 1001): field 'slots': slot 120 out of range [0, 100) of WAN port "
            "'wan1'");
  EXPECT_THAT(refusal(std::string(R"({"cmd":"apply","add":[)") + kTunnel + "," + kTunnel + "]}"),
              HasSubstr("add[1] (tunnel 1001): field 'id': tunnel 1001 appears twice"));
  EXPECT_EQ(refusal(R"({"cmd":"apply","remove":[7,99]})"),
            "remove[1]: no tunnel 99 to remove (tunnels: 7)");
  EXPECT_EQ(refusal(R"({"cmd":"apply","remove":["7"]})"),
            "remove[0]: expected a tunnel id (an integer 1..4294967295), got \"7\"");
  EXPECT_THAT(refusal(R"({"cmd":"modify_tunnel","tunnel":{"id":7,"peer":"site-b","auth":"none",)"
                      R"("rate":"100mbit","slots":"0-49","replay_window":128}})"),
              HasSubstr("modify[0] (tunnel 7): field 'replay_window': cannot change at run time "
                        "(4096 -> 128)"));
  EXPECT_THAT(refusal(R"({"cmd":"modify_tunnel","tunnel":{"id":8,"peer":"site-b","auth":"none",)"
                      R"("rate":"100mbit","slots":"0-49"}})"),
              HasSubstr("modify[0] (tunnel 8): field 'id': no tunnel 8 to modify"));
  EXPECT_EQ(refusal(R"({"cmd":"add_tunnel","tunnel":{"id":1001,"peer":"site-b","auth":"none",)"
                    R"("rate":"10mbit","slots":"60","service":{"deliver":"127.0.0.1:9"}}})"),
            "add[0] (tunnel 1001): field 'service': service ports are set in the configuration "
            "file only");
  EXPECT_EQ(refusal(R"({"cmd":"remove_tunnel"})"),
            "remove_tunnel needs \"id\": a tunnel id (an integer 1..4294967295)");
  EXPECT_EQ(
      refusal(std::string(R"({"cmd":"add_tunnel","if_generation":3,"tunnel":)") + kTunnel + "}"),
      "if_generation 3 does not match the gateway's generation 0: it changed since it was "
      "read (read tunnels again)");
  EXPECT_EQ(engine_->generation(), 0u);
  EXPECT_EQ(engine_->control_io().applied, 0u);
  EXPECT_EQ(engine_->control_io().refused_writes, 13u);
}

TEST_F(WriteRequests, AddModifyRemoveOverTheProtocol) {
  auto ok = [&](std::string_view request) {
    const auto answer = boost::json::parse(write(request));
    EXPECT_FALSE(answer.as_object().contains("error")) << answer;
    return answer;
  };
  auto added =
      ok(std::string(R"({"cmd":"add_tunnel","if_generation":0,"tunnel":)") + kTunnel + "}");
  EXPECT_EQ(boost::json::serialize(added),
            R"({"ok":true,"generation":1,"added":[1001],"modified":[],"removed":[]})");
  const auto tunnels = ok(R"({"cmd":"tunnels"})");
  EXPECT_EQ(tunnels.at("generation").to_number<uint64_t>(), 1u);
  EXPECT_EQ(tunnels.at("boot_id").as_string().size(), 16u);
  const auto& list = tunnels.at("tunnels").as_array();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1].at("id").to_number<uint32_t>(), 1001u);
  EXPECT_EQ(list[1].at("owner").as_string(), "agent:t");
  EXPECT_EQ(list[1].at("rate_bps").to_number<uint64_t>(), 10'000'000u);
  EXPECT_EQ(boost::json::serialize(list[1].at("slots")), "[60,61,62,63,64,65,66,67,68,69]");
  EXPECT_GT(list[1].at("guaranteed_rate_bps").to_number<uint64_t>(), 10'000'000u);
  EXPECT_FALSE(list[1].as_object().contains("service"));
  EXPECT_EQ(tunnels.at("wan_ports").at(0).at("slot_count").to_number<uint32_t>(), 100u);
  EXPECT_EQ(tunnels.at("peers").at(0).at("endpoint").as_string(), "127.0.0.1:4790");

  auto applied = ok(R"({"cmd":"apply","if_generation":1,"modify":[{"id":1001,"peer":"site-b","auth":"none",)"
                    R"("rate":"20mbit","slots":[60,61,62,63,64,65,66,67,68,69,70]}],)"
                    R"("remove":[7]})");
  EXPECT_EQ(boost::json::serialize(applied),
            R"({"ok":true,"generation":2,"added":[],"modified":[1001],"removed":[7]})");
  EXPECT_EQ(engine_->config().tunnels.size(), 1u);
  EXPECT_EQ(engine_->config().tunnels[0].rate_bps, 20'000'000u);
  EXPECT_EQ(engine_->config().tunnels[0].owner, "");  // a modify replaces the whole definition
  EXPECT_THAT(write(R"({"cmd":"config"})"), HasSubstr("  - id: 1001\n"));
  EXPECT_EQ(boost::json::serialize(ok(R"({"cmd":"remove_tunnel","id":1001})")),
            R"({"ok":true,"generation":3,"added":[],"modified":[],"removed":[1001]})");
  EXPECT_EQ(engine_->control_io().applied, 3u);
  const auto stats = boost::json::parse(engine_->stats_json(kStartNs));
  EXPECT_EQ(stats.at("control").at("applied").to_number<uint64_t>(), 3u);
  EXPECT_EQ(stats.at("generation").to_number<uint64_t>(), 3u);
  EXPECT_EQ(stats.at("tunnels").as_array().size(), 0u);
}

TEST_F(WriteRequests, ARefusedPeerIsCountedInStats) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root: the test forks a client that setuid()s to 65534 (CI runs as root)";
  }
  TempDir dir;
  const std::string path = dir.file("admin.sock");
  auto server = ControlServer::start(path, admin_options(0666));
  ASSERT_TRUE(server) << server.error().message;
  const std::string answer = ask_as_nobody(path, [&] {
    pollfd descriptor{(*server)->fd(), POLLIN, 0};
    (void)::poll(&descriptor, 1, 1);
    (*server)->poll_st(*engine_, kStartNs);
  });
  EXPECT_THAT(answer, HasSubstr("uid 65534 may not use the admin socket"));
  const auto stats = boost::json::parse(engine_->stats_json(kStartNs));
  EXPECT_EQ(stats.at("control").at("refused_peers").to_number<uint64_t>(), 1u);
  EXPECT_EQ(stats.at("control").at("requests").to_number<uint64_t>(), 0u);  // never read
  EXPECT_EQ(engine_->generation(), 0u);
}

TEST_F(WriteRequests, OverARealAdminSocket) {
  TempDir dir;
  const std::string path = dir.file("admin.sock");
  auto server = ControlServer::start(path, admin_options());
  ASSERT_TRUE(server) << server.error().message;
  auto answer = std::async(std::launch::async, [&] {
    return control_request(path, std::string(R"({"cmd":"add_tunnel","tunnel":)") + kTunnel + "}");
  });
  while (answer.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    pollfd descriptor{(*server)->fd(), POLLIN, 0};
    (void)::poll(&descriptor, 1, 1);
    (*server)->poll_st(*engine_, kStartNs);
  }
  auto result = answer.get();
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(*result, R"({"ok":true,"generation":1,"added":[1001],"modified":[],"removed":[]})");
  EXPECT_EQ(engine_->tunnel_index(1001), 1u);
}

}  // namespace
}  // namespace detwan::dataplane::gw
