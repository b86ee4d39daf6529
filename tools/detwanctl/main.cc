// detwanctl: reservations of deterministic tunnels, from the command line (docs/control.md).
//
//   detwanctl [--agent URL] [--token T | --token-file F] [--ca F] [--cert F --key F] [--json] VERB
//   ...
//     reserve --from A --to B --rate R [--src-prefix P]... [--dst-prefix P]... [--burst SIZE]
//     [--max-latency D] [--max-latency-variation D]
//             [--max-loss F] [--start TIME] (--end TIME | --duration D) [--asap] [--paths K]
//             [--protect 1+1] [--encrypt aes-256-gcm|chacha20-poly1305|none]
//             [--hold D] [--commit] [--provision] [--no-wait] [--request-id ID]
//     commit|abort|release|terminate|rotate-key ID      provision ID [--no-wait]
//     modify ID [--rate R] [--end TIME | --extend D]
//     show ID         list [--state S]       topology
//     paths --from A --to B [--rate R] [--k K] [--max-latency D] [--max-latency-variation D]
//           [--start TIME] [--duration D] [--all]
//     pool register|list|show|remove ...   plan ...        (compute.h)
// Units as everywhere in detwan: 10ms, 100mbit, 64kb. TIME: now, +10m (from now), @UNIX_SECONDS,
// or 2026-12-01T14:00:00Z. --agent defaults to $DETWAN_AGENT, then http://127.0.0.1:7800;
// --token to $DETWAN_AGENT_TOKEN, --token-file to $DETWAN_AGENT_TOKEN_FILE (a secret file: ours
// or root's, not readable by others), --ca to $DETWAN_AGENT_CA, --cert/--key to
// $DETWAN_AGENT_CERT/$DETWAN_AGENT_KEY. An https:// agent is verified against --ca (else the
// system's store); --ca/--cert/--key with an http:// agent are refused (docs/trust.md).
// Exit status: 0 done; 1 refused or failed (no capacity, bound unachievable, wrong state, agent
// unreachable, a provisioned tunnel not active in time); 2 bad usage or a malformed request.
// With --json the agent's JSON (the error object included) goes to stdout.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "common/crypto.h"
#include "common/secret_file.h"
#include "common/units.h"
#include "common/version.h"
#include "control/client/http_client.h"
#include "tools/detwanctl/compute.h"
#include "tools/detwanctl/format.h"

namespace detwan::tools::ctl {
namespace {
namespace json = boost::json;
using control::client::http_call_replicas;
using control::client::parse_urls;
using control::client::Url;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct Usage {
  std::string message;
};

int64_t realtime_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

int64_t duration_of(const std::string& option, const std::string& text) {
  auto ns = common::parse_duration_ns(text);
  if (!ns) throw Usage{fmt::format("{}: {}", option, ns.error().message)};
  return *ns;
}

uint64_t rate_of(const std::string& option, const std::string& text) {
  auto bps = common::parse_rate_bps(text);
  if (!bps) throw Usage{fmt::format("{}: {}", option, bps.error().message)};
  return *bps;
}

int64_t time_of(const std::string& option, const std::string& text) {
  if (text == "now") return realtime_ns();
  if (!text.empty() && text.front() == '+')
    return realtime_ns() + duration_of(option, text.substr(1));
  if (!text.empty() && text.front() == '@') {
    char* end = nullptr;
    const double seconds = std::strtod(text.c_str() + 1, &end);
    if (end == text.c_str() + 1 || *end != '\0')
      throw Usage{fmt::format("{}: '{}' is not @UNIX_SECONDS", option, text)};
    return static_cast<int64_t>(seconds * 1e9);
  }
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr || (*end != '\0' && std::string(end) != "Z")) {
    throw Usage{
        fmt::format("{}: '{}' is not a time (now, +10m, @UNIX_SECONDS or "
                    "2026-12-01T14:00:00Z, UTC)",
                    option, text)};
  }
  return static_cast<int64_t>(timegm(&tm)) * 1'000'000'000;
}

struct Context {
  Url url;                // the first of urls (its scheme decides TLS)
  std::vector<Url> urls;  // the agent's replica set (--agent URL1,URL2,...)
  control::client::TlsClientOptions tls;  // used for https:// URLs
  std::string token;
  bool json = false;
  int timeout_ms = 30'000;
};

// Sends, prints, and returns the exit status. `print` formats a successful answer.
int call(const Context& c, const std::string& method, const std::string& path,
         const std::string& body, const std::function<std::string(const json::value&)>& print,
         const std::function<int(const json::value&)>& verdict = nullptr) {
  auto answer = http_call_replicas(c.urls, method, path, body, c.token, c.timeout_ms,
                                   c.timeout_ms, "detwanctl", &c.tls);
  if (!answer) {
    if (c.json) {
      std::printf("%s\n",
                  json::serialize(
                      json::object{{"error", json::object{{"code", "agent_unreachable"},
                                                          {"message", answer.error().message}}}})
                      .c_str());
    }
    std::fprintf(stderr, "detwanctl: %s\n", answer.error().message.c_str());
    return kExitFailed;
  }
  boost::system::error_code ec;
  const json::value value = json::parse(answer->body, ec);
  if (ec) {
    std::fprintf(stderr, "detwanctl: the agent answered %d with a body that is not JSON: %.200s\n",
                 answer->status, answer->body.c_str());
    return kExitFailed;
  }
  if (answer->status >= 300) {
    if (c.json) {
      std::printf("%s\n", json::serialize(value).c_str());
    }
    std::fprintf(
        stderr, "detwanctl: %s\n",
        value.is_object() ? format_error(value.as_object()).c_str() : answer->body.c_str());
    return answer->status == 400 || answer->status == 405 || answer->status == 413 ? kExitUsage
                                                                                   : kExitFailed;
  }
  if (c.json) {
    std::printf("%s\n", json::serialize(value).c_str());
  } else {
    std::fputs(print(value).c_str(), stdout);
  }
  return verdict ? verdict(value) : kExitOk;
}

int provisioned_verdict(const json::value& v) {
  const json::object& r = v.as_object();
  const json::value* dataplane = r.if_contains("dataplane");
  if (r.at("state").as_string() == "provisioned" && dataplane != nullptr &&
      !dataplane->as_object().at("active").as_bool()) {
    const json::value* spec = r.if_contains("spec");
    const int64_t start =
        spec != nullptr ? spec->as_object().at("start_unix_ns").to_number<int64_t>() : 0;
    if (start <= realtime_ns()) {
      std::fprintf(stderr,
                   "detwanctl: %s is provisioned but its tunnel is not active on every gateway "
                   "yet (see the gateways' errors above)\n",
                   std::string(r.at("id").as_string()).c_str());
      return kExitFailed;
    }
  }
  return kExitOk;
}

std::string print_reservation(const json::value& v) { return format_reservation(v.as_object()); }

int run(int argc, char** argv) {
  CLI::App app{"detwanctl: reservations of deterministic tunnels (docs/control.md)"};
  app.set_version_flag("--version", common::version_line("detwanctl"));
  app.require_subcommand(1);
  const char* env_agent = std::getenv("DETWAN_AGENT");
  const char* env_token = std::getenv("DETWAN_AGENT_TOKEN");
  std::string agent = env_agent != nullptr ? env_agent : "http://127.0.0.1:7800";
  std::string token = env_token != nullptr ? env_token : "";
  auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value != nullptr ? value : "");
  };
  std::string token_file = env("DETWAN_AGENT_TOKEN_FILE");
  Context c;
  c.tls.ca_file = env("DETWAN_AGENT_CA");
  c.tls.cert_file = env("DETWAN_AGENT_CERT");
  c.tls.key_file = env("DETWAN_AGENT_KEY");
  app.add_option("--agent", agent,
                 "agent URL, or its replicas' URL1,URL2,... (default $DETWAN_AGENT or "
                 "http://127.0.0.1:7800)");
  CLI::Option* token_option =
      app.add_option("--token", token, "bearer token (default $DETWAN_AGENT_TOKEN)");
  CLI::Option* token_file_option =
      app.add_option("--token-file", token_file,
                     "file holding the bearer token (default $DETWAN_AGENT_TOKEN_FILE)");
  CLI::Option* ca_option = app.add_option(
      "--ca", c.tls.ca_file, "CA file verifying an https agent (default $DETWAN_AGENT_CA)");
  CLI::Option* cert_option = app.add_option(
      "--cert", c.tls.cert_file, "client certificate for mutual TLS (default $DETWAN_AGENT_CERT)");
  CLI::Option* key_option =
      app.add_option("--key", c.tls.key_file, "its private key (default $DETWAN_AGENT_KEY)");
  app.add_flag("--json", c.json, "print the agent's JSON");
  app.add_option("--timeout", c.timeout_ms, "ms to wait for the agent")->capture_default_str();

  std::string from, to, rate, burst, max_latency, variation, start, end, duration_text, hold,
      request_id, state, extend;
  double max_loss = -1;
  uint32_t paths = 1;
  std::string protect;
  std::string encrypt;
  uint32_t k = 1;
  bool asap = false, commit = false, provision = false, no_wait = false, all = false;
  std::string id;
  std::vector<std::string> src_prefixes, dst_prefixes;

  CLI::App* reserve = app.add_subcommand("reserve", "reserve a deterministic path");
  reserve->add_option("--from", from, "source site")->required();
  reserve->add_option("--to", to, "destination site")->required();
  reserve->add_option("--rate", rate, "reserved rate in each direction, e.g. 50mbit")->required();
  reserve->add_option("--src-prefix", src_prefixes,
                      "traffic to these src addresses (default: the site's tunnel prefixes)");
  reserve->add_option("--dst-prefix", dst_prefixes,
                      "traffic to these dst addresses (default: the site's tunnel prefixes)");
  reserve->add_option("--burst", burst, "policer depth, e.g. 64kb (default: one slot cycle)");
  reserve->add_option("--max-latency", max_latency, "RFC 9016 MaxLatency, e.g. 40ms");
  reserve->add_option("--max-latency-variation", variation,
                      "RFC 9016 MaxLatencyVariation, e.g. 5ms");
  reserve->add_option("--max-loss", max_loss, "RFC 9016 MaxLoss, a ratio in [0, 1]");
  reserve->add_option("--start", start, "start time (default now)");
  reserve->add_option("--end", end, "end time");
  reserve->add_option("--duration", duration_text, "length, e.g. 10m");
  reserve->add_flag("--asap", asap, "start as soon as the window fits (needs --duration)");
  reserve->add_option("--paths", paths, "link-disjoint paths to reserve")->check(CLI::Range(1, 4));
  reserve
      ->add_option("--protect", protect,
                   "1+1: every packet on two link-disjoint paths, the first copy delivered "
                   "(reserves 2 paths)")
      ->check(CLI::IsMember({"none", "1+1"}));
  reserve
      ->add_option("--encrypt", encrypt,
                   "cipher of the tunnel, whose key the agent draws (default aes-256-gcm; "
                   "'none' only if you must: the tunnel is then unauthenticated)")
      ->check(CLI::IsMember({"none", "aes-256-gcm", "chacha20-poly1305"}));
  reserve->add_option("--hold", hold, "hold timeout before commit, e.g. 2m");
  reserve->add_flag("--commit", commit, "commit at once");
  reserve->add_flag("--provision", provision, "commit and provision at once");
  reserve->add_flag("--no-wait", no_wait, "do not wait for the gateways");
  reserve->add_option("--request-id", request_id, "client request id (idempotent retries)");

  std::map<std::string, CLI::App*> transitions;
  for (const char* verb :
       {"commit", "abort", "provision", "release", "terminate", "show", "rotate-key"}) {
    CLI::App* sub = app.add_subcommand(verb, std::string(verb) + " a reservation");
    sub->add_option("id", id, "reservation id (r-N)")->required();
    if (std::string(verb) == "provision")
      sub->add_flag("--no-wait", no_wait, "do not wait for the gateways");
    transitions[verb] = sub;
  }
  CLI::App* modify = app.add_subcommand("modify", "change the rate or the end of a reservation");
  modify->add_option("id", id, "reservation id")->required();
  modify->add_option("--rate", rate, "new rate");
  modify->add_option("--end", end, "new end time");
  modify->add_option("--extend", extend, "move the end later by this much");
  modify->add_option("--request-id", request_id, "client request id");
  CLI::App* list = app.add_subcommand("list", "list reservations");
  list->add_option("--state", state, "only this state");
  CLI::App* path_cmd =
      app.add_subcommand("paths", "candidate paths and their bounds (nothing booked)");
  path_cmd->add_option("--from", from, "source site")->required();
  path_cmd->add_option("--to", to, "destination site")->required();
  path_cmd->add_option("--rate", rate, "rate the paths must have free");
  path_cmd->add_option("--burst", burst, "policer depth");
  path_cmd->add_option("--k", k, "link-disjoint paths")->check(CLI::Range(1, 8));
  path_cmd->add_option("--max-latency", max_latency, "only to mark paths that meet it");
  path_cmd->add_option("--max-latency-variation", variation, "chooses on-time or in-time delivery");
  path_cmd->add_option("--start", start, "window start (default now)");
  path_cmd->add_option("--duration", duration_text, "window length (default 1h)");
  path_cmd->add_flag("--all", all, "ignore capacity (the topology's paths)");
  CLI::App* topology =
      app.add_subcommand("topology", "sites, gateways and links with the rate reserved now");
  ComputeArgs compute;
  add_compute_commands(app, compute);

  // --agent, --token, --json and --timeout may also follow the verb
  // (`detwanctl reserve ... --json`).
  for (CLI::App* sub : app.get_subcommands({})) sub->fallthrough();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  try {
    auto urls = parse_urls(agent);
    if (!urls) throw Usage{"--agent: " + urls.error().message};
    c.urls = *urls;
    c.url = c.urls.front();
    for (const Url& u : c.urls) {
      if (u.https != c.url.https) throw Usage{"--agent: give every replica with the same scheme"};
    }
    c.token = token;
    if (token_option->count() > 0 && token_file_option->count() > 0) {
      throw Usage{"--token and --token-file: give one"};
    }
    if (!token_file.empty() && token_option->count() == 0) {
      auto text = common::read_secret_file(token_file, "token file", 4096);
      if (!text) throw Usage{"--token-file: " + text.error().message};
      const size_t first = text->find_first_not_of(" \t\r\n");
      const size_t last = text->find_last_not_of(" \t\r\n");
      if (first == std::string::npos) throw Usage{"--token-file " + token_file + ": empty"};
      c.token = text->substr(first, last - first + 1);
    }
    if (!c.url.https) {
      if (ca_option->count() + cert_option->count() + key_option->count() > 0) {
        throw Usage{"--ca/--cert/--key need an https:// agent (not " + agent + ")"};
      }
      c.tls = {};  // $DETWAN_AGENT_CA etc. apply to https agents only
    }
    if (*reserve) {
      json::object body{{"src", from}, {"dst", to}, {"min_bandwidth_bps", rate_of("--rate", rate)}};
      if (!burst.empty()) {
        auto bytes = common::parse_size_bytes(burst);
        if (!bytes) throw Usage{"--burst: " + bytes.error().message};
        body["max_burst_bytes"] = *bytes;
      }
      for (const auto& [key, list] :
           {std::pair{"src_prefixes", &src_prefixes}, std::pair{"dst_prefixes", &dst_prefixes}}) {
        if (list->empty()) continue;
        json::array a;
        for (const std::string& p : *list) a.push_back(json::string(p));
        body[key] = std::move(a);
      }
      if (!max_latency.empty()) body["max_latency_ns"] = duration_of("--max-latency", max_latency);
      if (!variation.empty())
        body["max_latency_variation_ns"] = duration_of("--max-latency-variation", variation);
      if (max_loss >= 0) body["max_loss"] = max_loss;
      if (paths != 1) body["paths"] = paths;
      if (!protect.empty()) body["protect"] = protect;
      if (!encrypt.empty()) body["encrypt"] = encrypt;
      if (!start.empty()) body["start_unix_ns"] = time_of("--start", start);
      if (!end.empty()) body["end_unix_ns"] = time_of("--end", end);
      if (!duration_text.empty()) body["duration_ns"] = duration_of("--duration", duration_text);
      if (end.empty() && duration_text.empty()) throw Usage{"reserve needs --end or --duration"};
      if (asap) body["asap"] = true;
      if (!hold.empty()) body["hold_timeout_ns"] = duration_of("--hold", hold);
      if (commit) body["commit"] = true;
      if (provision) body["provision"] = true;
      if (!request_id.empty()) body["client_request_id"] = request_id;
      if (request_id.empty() && c.urls.size() > 1) {
        // A replica set: the request may be sent again after a failover; its id makes the
        // repetition find the reservation the first attempt made instead of booking another.
        auto nonce = common::crypto::random_u64();
        if (!nonce) throw Usage{"cannot draw a request id: " + nonce.error().message};
        body["client_request_id"] = fmt::format("detwanctl-{:016x}", *nonce);
      }
      return call(
          c, "POST", no_wait ? "/v1/reservations?wait=false" : "/v1/reservations",
          json::serialize(body), print_reservation,
          provision && !no_wait ? provisioned_verdict : std::function<int(const json::value&)>());
    }
    for (const auto& [verb, sub] : transitions) {
      if (!*sub) continue;
      if (verb == "show") return call(c, "GET", "/v1/reservations/" + id, "", print_reservation);
      const std::string path = "/v1/reservations/" + id + "/" + verb +
                               (verb == "provision" && no_wait ? "?wait=false" : "");
      return call(c, "POST", path, "", print_reservation,
                  verb == "provision" && !no_wait ? provisioned_verdict
                                                  : std::function<int(const json::value&)>());
    }
    if (*modify) {
      json::object body;
      if (!rate.empty()) body["min_bandwidth_bps"] = rate_of("--rate", rate);
      if (!end.empty() && !extend.empty()) throw Usage{"give --end or --extend, not both"};
      if (!end.empty()) body["end_unix_ns"] = time_of("--end", end);
      if (!extend.empty()) {
        auto current = http_call_replicas(c.urls, "GET", "/v1/reservations/" + id, "", c.token,
                                          c.timeout_ms, c.timeout_ms, "detwanctl", &c.tls);
        if (!current || current->status != 200) throw Usage{"--extend: cannot read " + id};
        const json::value r = json::parse(current->body);
        body["end_unix_ns"] =
            r.at("spec").at("end_unix_ns").to_number<int64_t>() + duration_of("--extend", extend);
      }
      if (!request_id.empty()) body["client_request_id"] = request_id;
      return call(c, "PATCH", "/v1/reservations/" + id, json::serialize(body), print_reservation);
    }
    if (*list) {
      return call(c, "GET", state.empty() ? "/v1/reservations" : "/v1/reservations?state=" + state,
                  "", [](const json::value& v) {
                    return format_reservation_list(v.as_object().at("reservations").as_array());
                  });
    }
    if (*path_cmd) {
      json::object body{{"src", from}, {"dst", to}, {"k", k}, {"require_capacity", !all}};
      if (!rate.empty()) body["min_bandwidth_bps"] = rate_of("--rate", rate);
      if (!burst.empty()) {
        auto bytes = common::parse_size_bytes(burst);
        if (!bytes) throw Usage{"--burst: " + bytes.error().message};
        body["max_burst_bytes"] = *bytes;
      }
      if (!max_latency.empty()) body["max_latency_ns"] = duration_of("--max-latency", max_latency);
      if (!variation.empty())
        body["max_latency_variation_ns"] = duration_of("--max-latency-variation", variation);
      if (!start.empty()) body["start_unix_ns"] = time_of("--start", start);
      if (!duration_text.empty()) body["duration_ns"] = duration_of("--duration", duration_text);
      return call(c, "POST", "/v1/paths", json::serialize(body),
                  [](const json::value& v) { return format_paths(v.as_object()); });
    }
    if (*topology) {
      return call(c, "GET", "/v1/topology", "",
                  [](const json::value& v) { return format_topology(v.as_object()); });
    }
    std::optional<ComputeCall> compute_request;
    try {
      compute_request = compute_call(compute, time_of);
    } catch (const std::invalid_argument& e) {
      throw Usage{e.what()};
    }
    if (compute_request) {
      return call(c, compute_request->method, compute_request->path, compute_request->body,
                  compute_request->print);
    }
  } catch (const Usage& usage) {
    std::fprintf(stderr, "detwanctl: %s (see --help)\n", usage.message.c_str());
    return kExitUsage;
  }
  return kExitUsage;
}

}  // namespace
}  // namespace detwan::tools::ctl

int main(int argc, char** argv) {
  try {
    return detwan::tools::ctl::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detwanctl: %s\n", e.what());
    return 1;
  }
}
