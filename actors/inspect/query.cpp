#include "actors/inspect/query.hpp"

#include <algorithm>
#include <charconv>

#include "actors/inspect/shard_state.hpp"

namespace fusee::server {

namespace {

using proto::err_code;
using proto::error;

bool parse_u32(const std::string& s, uint32_t& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && r.ec == std::errc{} && r.ptr == s.data() + s.size();
}

bool is_in(const std::vector<std::string>& words, const std::string& w) {
  return std::find(words.begin(), words.end(), w) != words.end();
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (auto& w : words)
    out += (out.empty() ? "" : ", ") + w;
  return out;
}

error bad(std::string message) {
  return error{err_code::bad_body, std::move(message)};
}

}  // namespace

const std::vector<std::string>& actor_kinds() {
  static const std::vector<std::string> k{"directory", "scheduler", "log",     "gateway",
                                          "cluster",   "endpoint",  "session", "shard"};
  return k;
}

const std::vector<std::string>& state_words() {
  static const std::vector<std::string> w = [] {
    std::vector<std::string> words;
    for (auto st : all_shard_states)  // shards (shard_state.hpp)
      words.emplace_back(state_name(st));
    for (const char* other : {// endpoints, log, gateway
                              "ok", "full", "failing", "failed",
                              // sessions
                              "handshake", "worker", "invoked", "client",
                              // directory, scheduler, cluster
                              "invoker", "no-invoker", "starting", "running", "halted", "degraded"})
      words.emplace_back(other);
    return words;
  }();
  return w;
}

std::optional<std::string> missing_shard(const inspect_query& q, uint32_t shards) {
  if (q.shard_from > q.shard_to || q.shard_from < shards) return std::nullopt;  // (none asked)
  return "no shard " + std::to_string(q.shard_from) + " on this node (it has " +
         std::to_string(shards) + ")";
}

proto::result<inspect_query> parse_query(const std::map<std::string, std::string>& args) {
  inspect_query q;
  for (auto& [key, value] : args) {
    if (key == "kind") {
      if (!value.empty() && !is_in(actor_kinds(), value))
        return bad("unknown kind \"" + value + "\" (kinds: " + joined(actor_kinds()) + ")");
      q.kind = value;
    } else if (key == "shard") {
      auto dash = value.find('-');
      uint32_t a = 0, b = 0;
      bool ok = dash == std::string::npos
                    ? parse_u32(value, a) && (b = a, true)
                    : parse_u32(value.substr(0, dash), a) && parse_u32(value.substr(dash + 1), b);
      if (!ok || a > b)
        return bad("shard \"" + value + "\" is not a shard number or a range such as 10-19");
      q.shard_from = a;
      q.shard_to = b;
      if (q.kind.empty()) q.kind = "shard";
    } else if (key == "state") {
      if (!value.empty() && !is_in(state_words(), value))
        return bad("unknown state \"" + value + "\" (states: " + joined(state_words()) + ")");
      q.state = value;
    } else if (key == "top") {
      if (!value.empty() && value != "mailbox")
        return bad("top \"" + value + "\": the only ranking is \"mailbox\"");
      q.top = value;
    } else if (key == "sample") {
      if (!parse_u32(value, q.sample)) return bad("sample \"" + value + "\" is not a number");
    } else if (key == "offset" || key == "limit" || key == "deadline_ms") {
      uint32_t n = 0;
      if (!parse_u32(value, n)) return bad(key + " \"" + value + "\" is not a number");
      if (key == "offset") q.offset = n;
      if (key == "limit") {
        if (n > inspect_query::max_limit)
          return bad("limit " + value + " is over " + std::to_string(inspect_query::max_limit) +
                     "; page with offset");
        q.limit = n;
      }
      if (key == "deadline_ms") {
        if (n == 0 || n > inspect_query::max_deadline_ms)
          return bad("deadline_ms must be 1 to " + std::to_string(inspect_query::max_deadline_ms));
        q.deadline_ms = n;
      }
    } else if (key == "grid" || key == "every") {
      if (value != "0" && value != "1" && value != "true" && value != "false")
        return bad(key + " must be 0 or 1");
      bool on = value == "1" || value == "true";
      (key == "grid" ? q.grid : q.every_actor) = on;
    } else {
      return bad("unknown parameter \"" + key +
                 "\" (parameters: kind, shard, state, top, offset, limit, deadline_ms, grid, "
                 "every, sample)");
    }
  }
  if (q.top == "mailbox") q.every_actor = true;
  if (q.sample > 0 && !q.every_actor)
    return bad("sample picks which shards every=1 asks; add every=1 (or top=mailbox)");
  return q;
}

}  // namespace fusee::server
