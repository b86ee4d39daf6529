// The detwan-gw program as built (its path is this test's first argument): exit statuses per
// docs/errors.md, --check-config output, stats against nothing and against a running gateway,
// a second gateway on the same control socket, SIGTERM.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>

#include "dataplane/gw/config.h"
#include "dataplane/gw/control_server.h"
#include "tests/dataplane/uring/uring_test_util.h"

extern char** environ;

namespace detwan::dataplane::daemon {
namespace {

std::string g_binary;  // set by main() from argv[1]

struct Outcome {
  int status = -1;  // exit status; 128 + signal if killed
  std::string out;
  std::string err;
};

// Starts the program with `args`; its stdout/stderr go to files so nothing can block on a pipe.
class Process {
 public:
  // stdin_path: a file the program reads as its standard input ("" = inherited).
  explicit Process(const std::vector<std::string>& args, const std::string& stdin_path = "") {
    static int counter = 0;
    const auto base =
        std::filesystem::temp_directory_path() /
        ("detwan-gw-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    out_path_ = base.string() + ".out";
    err_path_ = base.string() + ".err";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    if (!stdin_path.empty()) {
      posix_spawn_file_actions_addopen(&actions, 0, stdin_path.c_str(), O_RDONLY, 0);
    }
    std::vector<std::string> all{g_binary};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : all) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int error = posix_spawn(&pid_, g_binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(error, 0) << g_binary << ": " << std::strerror(error);
    if (error != 0) pid_ = -1;
  }
  ~Process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(out_path_);
    std::filesystem::remove(err_path_);
  }
  void signal(int number) const { ::kill(pid_, number); }
  Outcome wait() {
    Outcome outcome;
    int status = 0;
    if (pid_ > 0 && ::waitpid(pid_, &status, 0) == pid_) {
      outcome.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    pid_ = -1;
    outcome.out = slurp(out_path_);
    outcome.err = slurp(err_path_);
    return outcome;
  }

 private:
  static std::string slurp(const std::string& path) {
    std::ifstream file(path);
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  }
  pid_t pid_ = -1;
  std::string out_path_;
  std::string err_path_;
};

Outcome run(const std::vector<std::string>& args) { return Process(args).wait(); }

class DetwanGw : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() /
                 ("detwan-gw-cli-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (directory_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // A gateway on 127.0.0.1 port 0 (WAN and service) with no TUN: runs unprivileged.
  static std::string config_text(const std::string& control, const std::string& rate = "100mbit") {
    return "gateway:\n"
           "  name: site-a\n"
           "  control_socket: \"" +
           control +
           "\"\n"
           "  buffers: 1024\n"
           "tun:\n"
           "  enabled: false\n"
           "wan_ports:\n"
           "  - name: wan1\n"
           "    local: 127.0.0.1:0\n"
           "    line_rate: 1gbit\n"
           "peers:\n"
           "  - name: site-b\n"
           "    wan_port: wan1\n"
           "    endpoint: 127.0.0.1:9\n"
           "tunnels:\n"
           "  - id: 7\n"
           "    peer: site-b\n"
           "    rate: " +
           rate +
           "\n"
           "    slots: 0-49\n"
           "    auth: none\n"
           "    service:\n"
           "      listen: 127.0.0.1:0\n"
           "      deliver: 127.0.0.1:9\n";
  }

  std::filesystem::path directory_;
};

TEST_F(DetwanGw, CheckConfigPrintsTheEffectiveConfiguration) {
  const std::string path = write("good.yaml", config_text("@x"));
  const Outcome outcome = run({"--check-config", path});
  EXPECT_EQ(outcome.status, 0) << outcome.err;
  auto config = gw::load_gateway_config(path);
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(outcome.out, gw::describe(*config));
  EXPECT_EQ(outcome.err, "");
}

TEST_F(DetwanGw, CheckConfigRefusesABadFileWithStatus2) {
  const std::string path = write("bad.yaml", config_text("@x", "4gbt"));
  const Outcome outcome = run({"--check-config", path});
  EXPECT_EQ(outcome.status, 2);
  EXPECT_EQ(outcome.out, "");
  EXPECT_NE(outcome.err.find(path + ":18:"), std::string::npos) << outcome.err;
  EXPECT_NE(outcome.err.find("'4gbt'"), std::string::npos) << outcome.err;

  const Outcome missing = run({"--check-config", (directory_ / "none.yaml").string()});
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("none.yaml"), std::string::npos) << missing.err;
}

TEST_F(DetwanGw, BadCommandLinesExitWithStatus2) {
  const std::string path = write("good.yaml", config_text("@x"));
  EXPECT_EQ(run({}).status, 2);
  EXPECT_EQ(run({"run"}).status, 2);
  EXPECT_EQ(run({"run", "--config", path, "--timing", "fast"}).status, 2);
  EXPECT_EQ(run({"run", "--config", path, "--cpu", "-3"}).status, 2);
  EXPECT_EQ(run({"stats", "--json", "--prometheus"}).status, 2);
  EXPECT_EQ(run({"--check-config", path, "run"}).status, 2);
  EXPECT_EQ(run({"--bogus"}).status, 2);
  const Outcome level = run({"run", "--config", path, "--log-level", "loud"});
  EXPECT_EQ(level.status, 2);
  EXPECT_NE(level.err.find("--log-level"), std::string::npos) << level.err;
  EXPECT_EQ(run({"--help"}).status, 0);
}

TEST_F(DetwanGw, StatsWithoutAGatewayExitsWithStatus1) {
  const std::string name = uring::testing::unique_socket_name("cli-none");
  const Outcome outcome = run({"stats", "--control", name});
  EXPECT_EQ(outcome.status, 1);
  EXPECT_EQ(outcome.err, "detwan-gw: no detwan-gw listening on " + name + ": Connection refused\n");
}

TEST_F(DetwanGw, RunsAnswersStatsRefusesATwinAndStopsOnSigterm) {
  const std::string name = uring::testing::unique_socket_name("cli-run");
  const std::string path = write("run.yaml", config_text("@unused"));
  Process gateway({"run", "--config", path, "--control", name, "--log-level", "warn"});
  // Ready when its control socket answers (polling an observable condition, bounded).
  std::optional<std::string> stats;
  for (int i = 0; i < 2000 && !stats; ++i) {
    auto answer = gw::control_request(name, R"({"cmd":"stats"})", 1000);
    if (answer)
      stats = *answer;
    else
      ::usleep(5000);
  }
  ASSERT_TRUE(stats) << "the gateway never answered on " << name;
  EXPECT_EQ(boost::json::parse(*stats).at("gateway").as_string(), "site-a");

  const Outcome json = run({"stats", "--control", name, "--json"});
  EXPECT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(boost::json::parse(json.out).at("tunnels").as_array().size(), 1u);
  const Outcome table = run({"stats", "--control", name});
  EXPECT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("gateway site-a"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("tunnel 7 -> site-b via wan1"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("peer site-b via wan1"), std::string::npos) << table.out;
  const Outcome prometheus = run({"stats", "--control", name, "--prometheus"});
  EXPECT_EQ(prometheus.status, 0) << prometheus.err;
  EXPECT_NE(prometheus.out.find("# TYPE"), std::string::npos);

  const Outcome twin = run({"--config", path, "--control", name});
  EXPECT_EQ(twin.status, 1);
  EXPECT_NE(twin.err.find("'" + name + "' is in use: another detwan-gw listens on it"),
            std::string::npos)
      << twin.err;

  gateway.signal(SIGTERM);
  const Outcome stopped = gateway.wait();
  EXPECT_EQ(stopped.status, 0) << stopped.err;
}

// A gateway that starts without tunnels, programmed with `apply` over its admin socket and read
// with `tunnels`.
TEST_F(DetwanGw, TunnelsAndApplyOnAGatewayStartedWithoutTunnels) {
  const std::string name = uring::testing::unique_socket_name("cli-apply");
  std::string text = config_text("@unused");
  text = text.substr(0, text.find("tunnels:"));  // no tunnels at all
  const std::string path = write("empty.yaml", text);
  const std::string admin = (directory_ / "admin.sock").string();
  Process gateway(
      {"run", "--config", path, "--control", name, "--admin-socket", admin, "--log-level", "warn"});
  std::optional<std::string> ready;
  for (int i = 0; i < 2000 && !ready; ++i) {
    auto answer = gw::control_request(admin, R"({"cmd":"tunnels"})", 1000);
    if (answer)
      ready = *answer;
    else
      ::usleep(5000);
  }
  ASSERT_TRUE(ready) << "the gateway never answered on " << admin;

  const Outcome empty = run({"tunnels", "--control", name, "--json"});
  EXPECT_EQ(empty.status, 0) << empty.err;
  const auto before = boost::json::parse(empty.out);
  EXPECT_EQ(before.at("generation").to_number<uint64_t>(), 0u);
  EXPECT_EQ(before.at("tunnels").as_array().size(), 0u);
  EXPECT_EQ(before.at("boot_id").as_string().size(), 16u);
  EXPECT_NE(run({"tunnels", "--control", name}).out.find("no tunnels"), std::string::npos);

  const std::string add =
      R"({"add":[{"id":1001,"peer":"site-b","auth":"none","owner":"agent:cli","rate":"10mbit",)"
      R"("slots":"60-69"}]})";
  // The read-only socket refuses it (status 2), naming where writes go.
  const Outcome refused = run({"apply", "--control", name, add});
  EXPECT_EQ(refused.status, 2);
  EXPECT_NE(refused.err.find("send it to the admin socket " + admin +
                             " (gateway.admin_socket), not " + name),
            std::string::npos)
      << refused.err;
  const Outcome applied = run({"apply", "--control", admin, add});
  EXPECT_EQ(applied.status, 0) << applied.err;
  EXPECT_EQ(applied.out,
            "{\"ok\":true,\"generation\":1,\"added\":[1001],\"modified\":[],\"removed\":[]}\n");
  const Outcome table = run({"tunnels", "--control", name});
  EXPECT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("generation 1"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("agent:cli"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("60-69"), std::string::npos) << table.out;

  // A request from a file; a refused one exits 2 and prints the answer with the generation.
  const std::string bad = write("bad.json", R"({"cmd":"modify_tunnel","tunnel":{"id":1001,)"
                                            R"("peer":"site-b","auth":"none","rate":"10mbit","slots":"160"}})");
  const Outcome refused_file = run({"apply", "--control", admin, "@" + bad});
  EXPECT_EQ(refused_file.status, 2);
  EXPECT_EQ(boost::json::parse(refused_file.out).at("generation").to_number<uint64_t>(), 1u);
  EXPECT_NE(refused_file.err.find("modify[0] (tunnel 1001): field 'slots': slot 160 out of "
                                  "range [0, 100) of WAN port 'wan1'"),
            std::string::npos)
      << refused_file.err;
  // From stdin ("-"), spread over lines: sent as one line.
  const std::string remove = write("remove.json", "{\n  \"remove\": [1001]\n}\n");
  const Outcome removed = Process({"apply", "--control", admin, "-"}, remove).wait();
  EXPECT_EQ(removed.status, 0) << removed.err;
  EXPECT_EQ(boost::json::parse(removed.out).at("generation").to_number<uint64_t>(), 2u);
  EXPECT_EQ(run({"apply", "--control", admin, "not json"}).status, 2);
  EXPECT_EQ(run({"apply", "--control", admin, "@" + (directory_ / "none.json").string()}).status,
            2);
  EXPECT_EQ(run({"apply", "--control", admin}).status, 2);  // no request
  const auto stats = boost::json::parse(run({"stats", "--control", name, "--json"}).out);
  EXPECT_EQ(stats.at("control").at("applied").to_number<uint64_t>(), 2u);

  struct stat info {};
  ASSERT_EQ(::lstat(admin.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  gateway.signal(SIGTERM);
  const Outcome stopped = gateway.wait();
  EXPECT_EQ(stopped.status, 0) << stopped.err;
  EXPECT_FALSE(std::filesystem::exists(admin));  // removed on a clean stop
}

// SIGHUP (systemctl reload): the file's tunnel changes applied in place; a tunnel added at run
// time stays; a file that changes anything but tunnels is refused and changes nothing.
TEST_F(DetwanGw, SighupReloadsTheFilesTunnelsAndRefusesOtherChanges) {
  const std::string name = uring::testing::unique_socket_name("cli-reload");
  const std::string path = write("reload.yaml", config_text("@unused"));
  const std::string admin = (directory_ / "admin.sock").string();
  Process gateway(
      {"run", "--config", path, "--control", name, "--admin-socket", admin, "--log-level", "info"});
  const auto tunnels = [&]() -> std::optional<boost::json::value> {
    auto answer = gw::control_request(name, R"({"cmd":"tunnels"})", 1000);
    if (!answer) return std::nullopt;
    return boost::json::parse(*answer);
  };
  // Polls (bounded) until the gateway's generation is `generation`.
  const auto until_generation = [&](uint64_t generation) -> boost::json::value {
    for (int i = 0; i < 2000; ++i) {
      if (auto t = tunnels(); t && t->at("generation").to_number<uint64_t>() == generation) {
        return *t;
      }
      ::usleep(5000);
    }
    ADD_FAILURE() << "generation " << generation << " never came";
    return nullptr;
  };
  const auto ids = [](const boost::json::value& t) {
    std::set<uint64_t> out;
    for (const auto& tunnel : t.at("tunnels").as_array()) {
      out.insert(tunnel.at("id").to_number<uint64_t>());
    }
    return out;
  };
  ASSERT_FALSE(until_generation(0).is_null()) << "the gateway never answered on " << name;
  // A tunnel added at run time, as the agent adds them.
  const Outcome applied = run({"apply", "--control", admin,
                               R"({"add":[{"id":1001,"peer":"site-b","auth":"none",)"
                               R"("owner":"agent:cli","rate":"10mbit","slots":"60-69"}]})"});
  ASSERT_EQ(applied.status, 0) << applied.err;

  // Tunnel 7 at another rate and a new tunnel 8.
  const std::string tunnel8 =
      "  - id: 8\n    peer: site-b\n    rate: 10mbit\n    slots: 50-59\n    auth: none\n";
  write("reload.yaml", config_text("@unused", "50mbit") + tunnel8);
  gateway.signal(SIGHUP);
  const boost::json::value second = until_generation(2);
  ASSERT_FALSE(second.is_null());
  EXPECT_EQ(ids(second), (std::set<uint64_t>{7, 8, 1001}));
  for (const auto& tunnel : second.at("tunnels").as_array()) {
    if (tunnel.at("id").to_number<uint64_t>() == 7) {
      EXPECT_EQ(tunnel.at("rate_bps").to_number<uint64_t>(), 50'000'000u);
    }
  }
  // Tunnel 8 gone from the file: removed; the run-time tunnel stays.
  write("reload.yaml", config_text("@unused", "50mbit"));
  gateway.signal(SIGHUP);
  const boost::json::value third = until_generation(3);
  ASSERT_FALSE(third.is_null());
  EXPECT_EQ(ids(third), (std::set<uint64_t>{7, 1001}));

  // Another WAN line rate: refused (counted), nothing changed.
  std::string other = config_text("@unused", "50mbit");
  other.replace(other.find("line_rate: 1gbit"), 16, "line_rate: 2gbit");
  write("reload.yaml", other);
  gateway.signal(SIGHUP);
  uint64_t refused = 0;
  for (int i = 0; i < 2000 && refused == 0; ++i) {
    const auto stats = boost::json::parse(run({"stats", "--control", name, "--json"}).out);
    refused = stats.at("control").at("refused_writes").to_number<uint64_t>();
    if (refused == 0) ::usleep(5000);
  }
  EXPECT_EQ(refused, 1u);
  // The same asked on the admin socket: the answer names what changed.
  const Outcome asked = run({"apply", "--control", admin, R"({"cmd":"reload"})"});
  EXPECT_EQ(asked.status, 2);
  EXPECT_NE(asked.err.find("'wan_ports' changed; a reload applies tunnel changes only"),
            std::string::npos)
      << asked.err;
  const auto after = tunnels();
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->at("generation").to_number<uint64_t>(), 3u);

  gateway.signal(SIGTERM);
  const Outcome stopped = gateway.wait();
  EXPECT_EQ(stopped.status, 0) << stopped.err;
  EXPECT_NE(stopped.err.find("generation 2, added 8, modified 7, removed -"), std::string::npos)
      << stopped.err;
  EXPECT_NE(stopped.err.find("reload refused:"), std::string::npos) << stopped.err;
}

TEST_F(DetwanGw, TunnelsAndApplyWithoutAGatewayExitWithStatus1) {
  const std::string name = uring::testing::unique_socket_name("cli-none");
  EXPECT_EQ(run({"tunnels", "--control", name}).status, 1);
  EXPECT_EQ(run({"apply", "--control", name, R"({"remove":[1]})"}).status, 1);
  const std::string path = write("good.yaml", config_text("@x"));
  const Outcome abstract = run({"run", "--config", path, "--admin-socket", "@admin"});
  EXPECT_EQ(abstract.status, 2);
  EXPECT_NE(abstract.err.find("--admin-socket: admin socket '@admin': must be a filesystem path"),
            std::string::npos)
      << abstract.err;
  EXPECT_EQ(run({"tunnels", "--config", path}).status, 2);
}

TEST_F(DetwanGw, RuntimeFailureExitsWithStatus1) {
  std::string text = config_text(uring::testing::unique_socket_name("cli-fail"));
  text.replace(text.find("127.0.0.1:0"), 11, "192.0.2.1:0");  // an address no interface has
  const Outcome outcome = run({"run", "--config", write("fail.yaml", text), "--log-level", "off"});
  EXPECT_EQ(outcome.status, 1);
  EXPECT_NE(
      outcome.err.find("WAN port 'wan1' (192.0.2.1:0): bind: Cannot assign requested address"),
      std::string::npos)
      << outcome.err;
}

}  // namespace
}  // namespace detwan::dataplane::daemon

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH-TO-detwan-gw [gtest options]\n", argv[0]);
    return 2;
  }
  detwan::dataplane::daemon::g_binary = argv[1];
  return RUN_ALL_TESTS();
}
