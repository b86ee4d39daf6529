#include "tools/wanem/session.h"

#include <exception>
#include <utility>

#include <fmt/format.h>

#include <boost/json.hpp>

namespace detwan::wanem {
namespace json = boost::json;

namespace {

std::string error_response(std::string_view message) {
  json::object response;
  response["ok"] = false;
  response["error"] = message;
  return json::serialize(response);
}

constexpr Direction kDirections[kDirectionCount] = {Direction::kAb, Direction::kBa};

}  // namespace

unsigned parse_direction_mask(std::string_view dir) noexcept {
  if (dir == "ab") return 1U;
  if (dir == "ba") return 2U;
  if (dir == "both") return 3U;
  return 0U;
}

Session::Session(const ImpairmentSpec& spec_ab, const ImpairmentSpec& spec_ba, int64_t start_ns,
                 uint32_t max_frames, std::string backend)
    : start_ns_(start_ns), backend_(std::move(backend)) {
  emulators_[0] = std::make_unique<Emulator>(spec_ab, start_ns, max_frames);
  emulators_[1] = std::make_unique<Emulator>(spec_ba, start_ns, max_frames);
}

std::string Session::handle_request_st(std::string_view request, PollThreadView& view) {
  try {
    json::error_code ec;
    json::value parsed = json::parse(request, ec);
    if (ec || !parsed.is_object()) return error_response("request is not a JSON object");
    const json::object& object = parsed.as_object();
    const json::value* cmd = object.if_contains("cmd");
    if (cmd == nullptr || !cmd->is_string()) return error_response("request has no \"cmd\"");
    const std::string_view command = cmd->as_string();
    const json::value* dir_value = object.if_contains("dir");
    const std::string_view dir = dir_value != nullptr && dir_value->is_string()
                                     ? std::string_view(dir_value->as_string())
                                     : std::string_view("both");
    if (command == "stats") {
      if (view.refresh_port_counters) view.refresh_port_counters();
      return "{\"ok\":true,\"stats\":" + stats_json_st(view) + "}";
    }
    if (command == "set") {
      const json::value* tokens = object.if_contains("tokens");
      if (tokens == nullptr || !tokens->is_string()) return error_response("set needs \"tokens\"");
      return set_st(dir, tokens->as_string(), view.now_ns);
    }
    if (command == "link") {
      const json::value* up = object.if_contains("up");
      if (up == nullptr || !up->is_bool()) return error_response("link needs \"up\": true|false");
      return link_st(dir, up->as_bool(), view.now_ns);
    }
    return error_response("unknown command '" + std::string(command) + "' (use stats, set, link)");
  } catch (const std::exception& e) {
    return error_response(std::string("internal error: ") + e.what());
  }
}

std::string Session::set_st(std::string_view dir, std::string_view tokens, int64_t now_ns) {
  const unsigned mask = parse_direction_mask(dir);
  if (mask == 0) return error_response("dir '" + std::string(dir) + "': use ab, ba or both");
  // Validate every affected direction before changing any, so "both" changes both or neither.
  std::array<ImpairmentSpec, kDirectionCount> next;
  for (Direction direction : kDirections) {
    const int i = index_of(direction);
    if ((mask & (1U << i)) == 0) continue;
    auto applied = apply_spec(emulators_[i]->spec(), tokens);
    if (!applied) return error_response(applied.error().message);
    if (auto valid = validate(*applied); !valid) return error_response(valid.error().message);
    next[i] = std::move(*applied);
  }
  json::object specs;
  for (Direction direction : kDirections) {
    const int i = index_of(direction);
    if ((mask & (1U << i)) != 0) {
      if (auto updated = emulators_[i]->update_spec(next[i], now_ns); !updated) {
        return error_response(std::string(name_of(direction)) + ": " + updated.error().message);
      }
    }
    specs[name_of(direction)] = format_spec(emulators_[i]->spec());
  }
  json::object response;
  response["ok"] = true;
  response["spec"] = std::move(specs);
  return json::serialize(response);
}

std::string Session::link_st(std::string_view dir, bool up, int64_t now_ns) {
  const unsigned mask = parse_direction_mask(dir);
  if (mask == 0) return error_response("dir '" + std::string(dir) + "': use ab, ba or both");
  json::object state;
  for (Direction direction : kDirections) {
    const int i = index_of(direction);
    if ((mask & (1U << i)) != 0) {
      emulators_[i]->set_link_up(up, now_ns);
      link_up_[i] = up;
    }
    state[name_of(direction)] = link_up_[i];
  }
  json::object response;
  response["ok"] = true;
  response["link_up"] = std::move(state);
  return json::serialize(response);
}

std::string Session::stats_json_st(PollThreadView& view) const {
  // Engine and port counters arrive as JSON text; splice them without re-parsing.
  std::string out = "{\"ab\":";
  out += emulators_[0]->counters_json();
  out += ",\"ba\":";
  out += emulators_[1]->counters_json();
  out += ",\"port\":";
  out += port_counters_json(view.port_counters);
  const LoopStats& loop = view.loop_stats;
  out += fmt::format(
      ",\"loop\":{{\"sleeps\":{},\"timer_wakeups\":{},\"io_wakeups\":{},"
      "\"coalesced_sleeps\":{},"
      "\"timer_late_ns\":{},\"release_late_ns\":{},\"realtime\":{},\"rt_demotions\":{},"
      "\"rt_promotions\":{}}}",
      loop.sleeps, loop.timer_wakeups, loop.io_wakeups, loop.coalesced_sleeps,
      loop.timer_late_ns.summary_json(),
      loop.release_late_ns.summary_json(), loop.realtime, loop.rt_demotions, loop.rt_promotions);
  json::object rest;
  rest["uptime_ns"] = view.now_ns - start_ns_;
  rest["backend"] = backend_;
  rest["spec"] = json::object{{"ab", format_spec(emulators_[0]->spec())},
                              {"ba", format_spec(emulators_[1]->spec())}};
  rest["link_up"] = json::object{{"ab", link_up_[0]}, {"ba", link_up_[1]}};
  std::string tail = json::serialize(rest);  // "{...}"
  out += ',';
  out.append(tail, 1, std::string::npos);  // drop its '{', keep its '}'
  return out;
}

}  // namespace detwan::wanem
