#include "load/scenario.hpp"

#include <sstream>
#include <variant>

#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include "protocol/messages.hpp"

namespace fusee::load {

namespace {

/// One key of a scenario: where it lives and its range (doubles and integers alike).
struct key {
  const char* table;
  const char* name;
  std::variant<std::string scenario::*, double scenario::*, uint32_t scenario::*,
               uint64_t scenario::*, bool scenario::*>
      target;
  double min;
  double max;
};

const key keys[] = {
    {"run", "name", &scenario::name, 0, 0},
    {"run", "duration_s", &scenario::duration_s, 0.1, 86400},
    {"run", "drain_s", &scenario::drain_s, 0, 3600},
    {"run", "server", &scenario::server, 0, 0},
    {"run", "shards", &scenario::shards, 1, 1000000},
    {"run", "restart_before_check", &scenario::restart_before_check, 0, 0},
    {"workers", "count", &scenario::workers, 0, 100000},
    {"workers", "max_shards", &scenario::max_shards, 0, 1000000},
    {"workers", "threads", &scenario::worker_threads, 1, 256},
    {"endpoints", "count", &scenario::endpoints, 0, 64},
    {"endpoints", "concurrency", &scenario::endpoint_concurrency, 1, 100000},
    {"endpoints", "budget_ms", &scenario::budget_ms, 100, 3600000},
    {"endpoints", "max_shards", &scenario::endpoint_max_shards, 0,
     proto::max_invocation_shards(96)},
    {"endpoints", "fail_rate", &scenario::fail_rate, 0, 1},
    {"endpoints", "hang_rate", &scenario::hang_rate, 0, 1},
    {"endpoints", "crash_rate", &scenario::crash_rate, 0, 1},
    {"clients", "connections", &scenario::connections, 1, 10000},
    {"clients", "rate", &scenario::rate, 0.1, 1e7},
    {"clients", "mode", &scenario::mode, 0, 0},
    {"clients", "in_flight", &scenario::in_flight, 1, 100000},
    {"clients", "signals", &scenario::signals, 0, 0},
    {"workflow", "steps", &scenario::steps, 0, 64},
    {"workflow", "step_us", &scenario::step_us, 0, 60000000},
    {"workflow", "sleep_ms", &scenario::sleep_ms, 0, 86400000},
    {"workflow", "wake_at_s", &scenario::wake_at_s, 0, 86400},
    {"chaos", "server_kills", &scenario::server_kills, 0, 1000},
    {"chaos", "worker_kill_every_s", &scenario::worker_kill_every_s, 0, 86400},
    {"chaos", "worker_down_ms", &scenario::worker_down_ms, 0, 3600000},
    {"targets", "max_start_p99_ms", &scenario::max_start_p99_ms, 0, 1e9},
    {"targets", "max_complete_p99_ms", &scenario::max_complete_p99_ms, 0, 1e9},
    {"targets", "max_errors", &scenario::max_errors, 0, 1e18},
    {"targets", "max_step_p99_over_p50", &scenario::max_step_p99_over_p50, 0, 1e6},
    {"targets", "max_rss_growth", &scenario::max_rss_growth, 0, 100},
    {"targets", "warmup_s", &scenario::warmup_s, 0, 86400},
    {"targets", "min_wakes_per_s", &scenario::min_wakes_per_s, 0, 1e7},
    {"targets", "max_wake_server_p99_ms", &scenario::max_wake_server_p99_ms, 0, 1e9},
    {"targets", "max_timer_lateness_p99_ms", &scenario::max_timer_lateness_p99_ms, 0, 1e9},
};

std::string where(const std::string& file, const toml::node& n) {
  return file + ":" + std::to_string(n.source().begin.line);
}

/// Rules between keys; the broken one, or empty.
std::string check_rules(const scenario& s) {
  if (s.mode != "open" && s.mode != "closed")
    return "`clients.mode` must be \"open\" or \"closed\", not \"" + s.mode + "\"";
  if (s.sleep_ms > 0 && s.wake_at_s > 0)
    return "`workflow.sleep_ms` and `workflow.wake_at_s` cannot both be set";
  if (s.signals && s.steps == 0)
    return "`clients.signals` needs `workflow.steps` of at least 1 (runs wait after it)";
  // It names the default report file (load-<name>.json).
  if (s.name.empty() || s.name.size() > 64 || s.name.front() == '.' ||
      s.name.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != std::string::npos)
    return "`run.name` = \"" + s.name +
           "\" must be 1 to 64 letters, digits, '.', '_' or '-' (not first '.'): it names the "
           "report file";
  return {};
}

/// Reads every key of `doc` into `s`; false and `*err` (prefixed by `where_of` the key) on a
/// mistake.
template <class Where>
bool read_keys(const toml::table& doc, scenario& s, std::string* err, Where where_of) {
  for (auto& [tname, tnode] : doc) {
    auto* table = tnode.as_table();
    if (!table) {
      *err = where_of(tnode) + ": `" + std::string(tname.str()) + "` must be a table";
      return false;
    }
    for (auto& [kname, node] : *table) {
      const key* k = nullptr;
      for (auto& c : keys)
        if (tname.str() == c.table && kname.str() == c.name) k = &c;
      std::string full = std::string(tname.str()) + "." + std::string(kname.str());
      if (!k) {
        *err = where_of(node) + ": unknown key `" + full + "`";
        return false;
      }
      bool ok = std::visit(
          [&](auto member) {
            using T = std::remove_reference_t<decltype(s.*member)>;
            if constexpr (std::is_same_v<T, std::string>) {
              auto v = node.template value<std::string>();
              if (!v) return (*err = where_of(node) + ": `" + full + "` must be a string"), false;
              s.*member = *v;
            } else if constexpr (std::is_same_v<T, bool>) {
              if (!node.is_boolean())  // value<bool>() would take 0 and 1 too
                return (*err = where_of(node) + ": `" + full + "` must be true or false"), false;
              s.*member = *node.template value<bool>();
            } else {
              auto v = node.template value<double>();
              if (!v || !(*v >= k->min && *v <= k->max))
                return (*err = where_of(node) + ": `" + full + "` must be a number from " +
                               (std::ostringstream{} << k->min).str() + " to " +
                               (std::ostringstream{} << k->max).str()),
                       false;
              if constexpr (!std::is_same_v<T, double>)
                if (*v != static_cast<double>(static_cast<T>(*v)))
                  return (*err = where_of(node) + ": `" + full + "` must be a whole number"), false;
              s.*member = static_cast<T>(*v);
            }
            return true;
          },
          k->target);
      if (!ok) return false;
    }
  }
  return true;
}

}  // namespace

std::optional<scenario> load_scenario(const std::string& file, std::string* err) {
  scenario s;
  toml::table doc;
  try {
    doc = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    *err = file + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description());
    return std::nullopt;
  }
  if (!read_keys(doc, s, err, [&](const toml::node& n) { return where(file, n); }))
    return std::nullopt;
  if (auto bad = check_rules(s); !bad.empty()) {
    *err = file + ": " + bad;
    return std::nullopt;
  }
  return s;
}

std::string apply_setting(scenario& s, const std::string& setting) {
  auto eq = setting.find('=');
  auto dot = setting.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    return "--set " + setting + ": write table.key=value (e.g. workflow.steps=5)";
  std::string table = setting.substr(0, dot), name = setting.substr(dot + 1, eq - dot - 1),
              value = setting.substr(eq + 1);
  auto where_of = [&](const toml::node&) { return "--set " + setting; };
  auto doc_of = [&](const std::string& v) {
    return toml::parse("[" + table + "]\n" + name + " = " + v + "\n");
  };
  auto quoted = [&] {
    std::ostringstream out;
    out << toml::value<std::string>(value);
    return out.str();
  }();
  // The value as TOML, or, when that does not parse or does not fit a key that takes a string
  // (a bare word, or a name like 123), as a string.
  std::string err;
  scenario t = s;
  try {
    bool read = false;
    try {
      read = read_keys(doc_of(value), t, &err, where_of);
    } catch (const toml::parse_error&) {
    }
    if (!read) {
      std::string as_string_err;
      t = s;
      if (!read_keys(doc_of(quoted), t, &as_string_err, where_of))
        return err.empty() ? as_string_err : err;
    }
  } catch (const toml::parse_error& e) {
    return "--set " + setting + ": " + std::string(e.description());
  }
  if (auto bad = check_rules(t); !bad.empty()) return "--set " + setting + ": " + bad;
  s = t;
  return {};
}

std::string to_toml(const scenario& s) {
  std::ostringstream o;
  std::string table;
  for (auto& k : keys) {
    if (table != k.table) o << (table.empty() ? "" : "\n") << "[" << (table = k.table) << "]\n";
    o << k.name << " = ";
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(s.*member)>;
          if constexpr (std::is_same_v<T, std::string>)
            o << toml::value<std::string>(s.*member);
          else if constexpr (std::is_same_v<T, bool>)
            o << (s.*member ? "true" : "false");
          else
            o << s.*member;
        },
        k.target);
    o << "\n";
  }
  return o.str();
}

}  // namespace fusee::load
