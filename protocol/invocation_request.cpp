#include "protocol/invocation_request.hpp"

#include <algorithm>

#include <simdjson.h>

#include "protocol/json_text.hpp"
#include "protocol/messages.hpp"

namespace fusee::proto {

// The most shards, each "4999999," (the last shard of the largest node), and a kilobyte for the
// other keys.
static_assert(uint64_t{max_invocation_shards(96)} * 8 + 1024 < max_invocation_body);

namespace {

constexpr std::pair<reason, std::string_view> reason_names[] = {
    {reason_call, "call"},         {reason_message, "message"},   {reason_timer, "timer"},
    {reason_recovery, "recovery"}, {reason_handback, "handback"}, {reason_code, "code"},
};

error bad(std::string message) {
  return error{err_code::bad_body, "invocation request: " + std::move(message)};
}

error bad_field(std::string_view key, simdjson::error_code ec) {
  return bad("\"" + std::string{key} + "\": " + simdjson::error_message(ec));
}

}  // namespace

std::string_view reason_name(uint8_t bit) {
  for (auto& [r, n] : reason_names)
    if (r == bit) return n;
  return {};
}

std::optional<reason> parse_reason(std::string_view name) {
  for (auto& [r, n] : reason_names)
    if (n == name) return r;
  return std::nullopt;
}

std::string reasons_text(uint8_t reasons) {
  std::string out;
  for (auto& [bit, name] : reason_names) {
    if ((reasons & bit) == 0) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

std::string to_json(const invocation_request& r) {
  std::string out = "{\"version\":" + std::to_string(r.version) + ",\"invocation\":\"" +
                    format_invocation_id(r.invocation) + "\",\"shards\":[";
  for (size_t i = 0; i < r.shards.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(r.shards[i].value());
  }
  out += "],\"budget_ms\":" + std::to_string(r.budget_ms) + ",\"reasons\":[";
  bool first = true;
  for (auto& [bit, name] : reason_names) {
    if ((r.reasons & bit) == 0) continue;
    if (!first) out += ',';
    first = false;
    append_json_string(out, name);
  }
  out += "],\"server\":";
  append_json_string(out, r.server);
  out += '}';
  return out;
}

result<invocation_request> parse_invocation_request(std::string_view json) {
  using namespace simdjson;
  // The DOM parser validates the whole document (trailing content included) before we look at it.
  thread_local dom::parser parser;
  dom::element doc;
  if (auto ec = parser.parse(json.data(), json.size()).get(doc)) return bad(error_message(ec));
  dom::object obj;
  if (auto ec = doc.get_object().get(obj))
    return bad(std::string{"the body must be a JSON object: "} + error_message(ec));

  invocation_request out;
  enum : unsigned {
    k_version = 1,
    k_invocation = 2,
    k_shards = 4,
    k_budget = 8,
    k_reasons = 16,
    k_server = 32,
    k_all = 63
  };
  unsigned seen = 0;
  auto first_time = [&](unsigned bit) {
    bool fresh = (seen & bit) == 0;
    seen |= bit;
    return fresh;
  };

  for (auto [key, value] : obj) {
    std::string key_copy{key};
    if (key_copy == "version") {
      if (!first_time(k_version)) return bad("\"version\" appears twice");
      uint64_t v = 0;
      if (auto ec = value.get_uint64().get(v)) return bad_field(key_copy, ec);
      if (v != 1)
        return bad("version " + std::to_string(v) + " is not supported (this side reads 1)");
      out.version = 1;
    } else if (key_copy == "invocation") {
      if (!first_time(k_invocation)) return bad("\"invocation\" appears twice");
      std::string_view s;
      if (auto ec = value.get_string().get(s)) return bad_field(key_copy, ec);
      auto id = parse_invocation_id(s);
      if (!id) return bad("\"invocation\" must be 16 lowercase hex digits of a nonzero id");
      out.invocation = *id;
    } else if (key_copy == "shards") {
      if (!first_time(k_shards)) return bad("\"shards\" appears twice");
      dom::array arr;
      if (auto ec = value.get_array().get(arr)) return bad_field(key_copy, ec);
      for (auto el : arr) {
        uint64_t v = 0;
        if (auto ec = el.get_uint64().get(v)) return bad_field(key_copy, ec);
        if (v > 0xFFFFFFFEull) return bad("shard " + std::to_string(v) + " is out of range");
        out.shards.emplace_back(static_cast<uint32_t>(v));
      }
    } else if (key_copy == "budget_ms") {
      if (!first_time(k_budget)) return bad("\"budget_ms\" appears twice");
      uint64_t v = 0;
      if (auto ec = value.get_uint64().get(v)) return bad_field(key_copy, ec);
      if (v == 0 || v > 0xFFFFFFFFull)
        return bad("budget_ms " + std::to_string(v) + " is outside 1..4294967295");
      out.budget_ms = static_cast<uint32_t>(v);
    } else if (key_copy == "reasons") {
      if (!first_time(k_reasons)) return bad("\"reasons\" appears twice");
      dom::array arr;
      if (auto ec = value.get_array().get(arr)) return bad_field(key_copy, ec);
      for (auto el : arr) {
        std::string_view s;
        if (auto ec = el.get_string().get(s)) return bad_field(key_copy, ec);
        auto r = parse_reason(s);
        if (!r) return bad("unknown reason \"" + std::string{s} + "\"");
        if (out.reasons & *r) return bad("reason \"" + std::string{s} + "\" appears twice");
        out.reasons |= *r;
      }
    } else if (key_copy == "server") {
      if (!first_time(k_server)) return bad("\"server\" appears twice");
      std::string_view s;
      if (auto ec = value.get_string().get(s)) return bad_field(key_copy, ec);
      if (s.empty()) return bad("\"server\" is empty");
      out.server = std::string{s};
    }
    // Other keys are skipped: a later version may add some.
  }
  if (seen != k_all) {
    static constexpr std::pair<unsigned, const char*> names[] = {
        {k_version, "version"},  {k_invocation, "invocation"}, {k_shards, "shards"},
        {k_budget, "budget_ms"}, {k_reasons, "reasons"},       {k_server, "server"}};
    for (auto& [bit, name] : names)
      if ((seen & bit) == 0) return bad(std::string{"missing \""} + name + "\"");
  }
  if (out.shards.empty()) return bad("\"shards\" is empty");
  auto sorted = out.shards;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return bad("\"shards\" lists a shard twice");
  return out;
}

}  // namespace fusee::proto
