#include "app/config.hpp"

#include <filesystem>
#include <sstream>
#include <variant>

#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

namespace fusee::app {

namespace {

using field = std::variant<std::string server_config::*, uint32_t server_config::*,
                           uint64_t server_config::*>;

struct setting {
  const char* table;
  const char* key;
  field target;
  uint64_t min;
  uint64_t max;
  const char* description;
  bool is_path = false;
};

// Every setting, once. Defaults are the member initialisers of server_config.
const setting settings[] = {
    {"server", "data_dir", &server_config::data_dir, 0, 0, "data directory, created if missing",
     true},
    {"server", "shards", &server_config::shards, 1, 0xFFFFFFFEull,
     "shards of the data dir; fixed once the dir exists"},
    {"server", "listen", &server_config::listen, 0, 0, "host:port for workers and clients"},
    {"server", "admin_listen", &server_config::admin_listen, 0, 0,
     "host:port of the admin HTTP server"},
    {"server", "advertise", &server_config::advertise, 0, 0,
     "address put in invocation bodies; empty = listen"},
    {"server", "segment_mb", &server_config::segment_mb, 1, 4096,
     "size of each preallocated log segment file, in MiB"},
    {"liveness", "ping_interval_ms", &server_config::ping_interval_ms, 1, 0xFFFFFFFFull,
     "how often a worker must send a frame"},
    {"liveness", "timeout_ms", &server_config::timeout_ms, 2, 0xFFFFFFFFull,
     "silence after which a worker's leases are revoked; more than ping_interval_ms"},
    {"invoker", "park_ms", &server_config::park_ms, 1, 0xFFFFFFFFull,
     "the longest a call or message waits for a holder"},
    {"invoker", "close_grace_ms", &server_config::close_grace_ms, 0, 0xFFFFFFFFull,
     "after a 2xx, how long before an invocation's leases are revoked"},
};

const setting* find(std::string_view table, std::string_view key) {
  for (auto& s : settings)
    if (table == s.table && key == s.key) return &s;
  return nullptr;
}

std::string where(const std::string& file, const toml::node& n) {
  std::ostringstream out;
  out << file << ":" << n.source().begin.line;
  return out.str();
}

}  // namespace

std::optional<host_port> parse_host_port(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  auto port_text = text.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  auto port = std::stoul(port_text);
  if (port > 65535) return std::nullopt;
  return host_port{text.substr(0, colon), static_cast<uint16_t>(port)};
}

std::optional<std::string> load_toml(const std::string& file, server_config& cfg) {
  toml::table root;
  try {
    root = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    std::ostringstream out;
    out << file << ":" << e.source().begin.line << ": " << e.description();
    return out.str();
  }
  auto base = std::filesystem::path(file).parent_path();
  for (auto&& [table_name, table_node] : root) {
    std::string tname{table_name.str()};
    if (tname == "endpoint")
      return where(file, table_node) +
             ": [[endpoint]] tables are not supported by this build yet (they arrive with the "
             "invoker)";
    auto* tbl = table_node.as_table();
    if (tbl == nullptr)
      return where(file, table_node) + ": unknown key `" + tname +
             "` (expected a table: [server], [liveness] or [invoker])";
    for (auto&& [key_name, node] : *tbl) {
      std::string key{key_name.str()};
      auto* s = find(tname, key);
      if (s == nullptr) return where(file, node) + ": unknown key `" + tname + "." + key + "`";
      std::string name = tname + "." + key;
      bool ok = false;
      try {
        ok = std::visit(
            [&](auto member) -> bool {
              using T = std::remove_reference_t<decltype(cfg.*member)>;
              if constexpr (std::is_same_v<T, std::string>) {
                auto v = node.template value<std::string>();
                if (!v) return false;
                cfg.*member = s->is_path && !v->empty() && !base.empty() &&
                                      std::filesystem::path(*v).is_relative()
                                  ? (base / *v).string()
                                  : *v;
                return true;
              } else {
                auto v = node.template value<int64_t>();
                if (!v || !node.is_integer()) return false;
                if (*v < 0 || static_cast<uint64_t>(*v) < s->min ||
                    static_cast<uint64_t>(*v) > s->max)
                  throw std::out_of_range(where(file, node) + ": `" + name +
                                          "` = " + std::to_string(*v) + " is outside " +
                                          std::to_string(s->min) + ".." + std::to_string(s->max));
                cfg.*member = static_cast<T>(*v);
                return true;
              }
            },
            s->target);
      } catch (const std::out_of_range& e) {
        return std::string{e.what()};
      }
      if (!ok)
        return where(file, node) + ": `" + name + "` has the wrong type (expected " +
               (std::holds_alternative<std::string server_config::*>(s->target) ? "a string"
                                                                                : "an integer") +
               ")";
    }
  }
  return std::nullopt;
}

std::optional<std::string> validate(const server_config& cfg) {
  for (auto& s : settings) {
    std::string name = std::string{s.table} + "." + s.key;
    auto* num32 = std::get_if<uint32_t server_config::*>(&s.target);
    auto* num64 = std::get_if<uint64_t server_config::*>(&s.target);
    uint64_t v = num32 ? cfg.**num32 : num64 ? cfg.**num64 : 0;
    if ((num32 || num64) && (v < s.min || v > s.max))
      return "`" + name + "` = " + std::to_string(v) + " is outside " + std::to_string(s.min) +
             ".." + std::to_string(s.max);
  }
  if (cfg.timeout_ms <= cfg.ping_interval_ms)
    return "`liveness.timeout_ms` (" + std::to_string(cfg.timeout_ms) +
           ") must be greater than `liveness.ping_interval_ms` (" +
           std::to_string(cfg.ping_interval_ms) + ")";
  if (!parse_host_port(cfg.listen))
    return "`server.listen` = \"" + cfg.listen + "\" is not host:port";
  if (!parse_host_port(cfg.admin_listen))
    return "`server.admin_listen` = \"" + cfg.admin_listen + "\" is not host:port";
  if (!cfg.advertise.empty() && !parse_host_port(cfg.advertise))
    return "`server.advertise` = \"" + cfg.advertise + "\" is not host:port";
  if (cfg.data_dir.empty()) return "`server.data_dir` is empty";
  return std::nullopt;
}

std::string describe_settings() {
  server_config defaults;
  std::ostringstream out;
  for (auto& s : settings) {
    out << "[" << s.table << "] " << s.key << " = ";
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(defaults.*member)>;
          if constexpr (std::is_same_v<T, std::string>)
            out << '"' << defaults.*member << '"';
          else
            out << defaults.*member << "  (" << s.min << ".." << s.max << ")";
        },
        s.target);
    out << "\n    " << s.description << "\n";
  }
  return out.str();
}

}  // namespace fusee::app
