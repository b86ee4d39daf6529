// The agent's tokens file (http_server.h, docs/trust.md "Tokens, verbs and tenants").
#include <algorithm>
#include <cctype>
#include <sstream>

#include <fmt/format.h>

#include "common/secret_file.h"
#include "control/api/http_internal.h"

namespace detwan::control::api {

namespace detail {

bool valid_label(std::string_view name, bool allow_star) {
  if (allow_star && name == "*") return true;
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

}  // namespace detail

namespace {

using detail::valid_label;

std::vector<std::string> split_commas(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    out.emplace_back(
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// "token=T tenant=N verbs=a,b [sites=x,y] [name=L]"; "" on success, else what is wrong.

std::string parse_scoped_token(std::istringstream& words, std::string first, Token* out) {
  bool has_token = false;
  bool has_tenant = false;
  bool has_verbs = false;
  std::string word = std::move(first);
  do {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) return fmt::format("'{}' is not KEY=VALUE", word);
    const std::string key = word.substr(0, eq);
    const std::string value = word.substr(eq + 1);
    if (key == "token") {
      if (value.size() < 16) return "token= needs a token of at least 16 characters";
      out->token = value;
      has_token = true;
    } else if (key == "tenant") {
      if (!valid_label(value, true))
        return fmt::format("tenant '{}' is not * or a name of A-Z a-z 0-9 . _ -", value);
      out->tenant = value;
      has_tenant = true;
    } else if (key == "verbs") {
      out->may_read = out->may_reserve = out->may_admin = false;
      for (const std::string& verb : split_commas(value)) {
        if (verb == "read") {
          out->may_read = true;
        } else if (verb == "reserve") {
          out->may_read = out->may_reserve = true;
        } else if (verb == "admin") {
          out->may_read = out->may_reserve = out->may_admin = true;
        } else {
          return fmt::format("verb '{}' is not one of read, reserve, admin", verb);
        }
      }
      has_verbs = true;
    } else if (key == "sites") {
      out->sites = split_commas(value);
      for (const std::string& site : out->sites) {
        if (!valid_label(site, false)) return fmt::format("site '{}' is not a site name", site);
      }
    } else if (key == "name") {
      if (!valid_label(value, false)) return fmt::format("name '{}' is not a label", value);
      out->name = value;
    } else {
      return fmt::format("unknown key '{}' (token, tenant, verbs, sites, name)", key);
    }
  } while (words >> word);
  if (!has_token || !has_tenant || !has_verbs) return "token=, tenant= and verbs= are required";
  if (out->tenant == "*") {
    if (!out->may_admin) return "tenant=* (every tenant) needs verbs=...,admin";
    out->tenant.clear();
  }
  out->write = out->may_reserve;
  return "";
}

}  // namespace

common::Result<std::vector<Token>> load_tokens(const std::string& path) {
  // Bearer tokens are secrets: root's or the agent's own, private to the owner, checked on the
  // opened descriptor (common/secret_file.h).
  auto text = common::read_secret_file(path, "tokens file", size_t{1} << 20);
  if (!text) return std::unexpected(text.error());
  std::istringstream in(*text);
  std::vector<Token> tokens;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string role;
    std::string token;
    std::string extra;
    if (!(words >> role)) continue;
    Token parsed;
    if (role.find('=') != std::string::npos) {
      const std::string problem = parse_scoped_token(words, role, &parsed);
      if (!problem.empty()) {
        return common::make_error(common::ErrorCode::kConfig,
                                  fmt::format("tokens file {}:{}: {}", path, number, problem));
      }
    } else {
      if (!(words >> token) || (words >> extra) || (role != "read" && role != "write") ||
          token.size() < 16) {
        return common::make_error(
            common::ErrorCode::kConfig,
            fmt::format("tokens file {}:{}: expected 'read TOKEN', 'write TOKEN' (a token of at "
                        "least 16 characters) or 'token=T tenant=N verbs=read[,reserve,admin]'",
                        path, number));
      }
      parsed.token = token;
      parsed.write = role == "write";
      parsed.may_reserve = parsed.may_admin = parsed.write;
    }
    if (parsed.name.empty()) parsed.name = fmt::format("line {}", number);
    // One token, one identity: a token given twice would act as whichever line matched last.
    for (const Token& earlier : tokens) {
      if (earlier.token == parsed.token) {
        return common::make_error(
            common::ErrorCode::kConfig,
            fmt::format("tokens file {}:{}: the same token as {}", path, number, earlier.name));
      }
    }
    tokens.push_back(std::move(parsed));
  }
  if (tokens.empty()) {
    return common::make_error(common::ErrorCode::kConfig,
                              fmt::format("tokens file {} has no token", path));
  }
  return tokens;
}

}  // namespace detwan::control::api
