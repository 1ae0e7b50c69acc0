#include "app/config.hpp"

#include "actors/logging.hpp"
#include "actors/token_store.hpp"
#include "client/secret_file.hpp"
#include "tls/context.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <variant>

#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

namespace fusee::app {

namespace {

namespace fs = std::filesystem;

/// One declared setting of a config struct C: where it lives, its bounds and what it means.
template <class C>
struct setting {
  using field =
      std::variant<std::string C::*, uint32_t C::*, uint64_t C::*, std::vector<std::string> C::*>;
  const char* table;
  const char* key;
  field target;
  uint64_t min;
  uint64_t max;
  const char* description;
  bool is_path = false;
};

constexpr uint64_t u32_max = 0xFFFFFFFFull;

// Every setting, once. Defaults are the member initialisers of server::node_settings and
// server::endpoint_settings (actors/node_settings.hpp).
const setting<server_config> server_settings[] = {
    {"server", "data_dir", &server_config::data_dir, 0, 0, "data directory, created if missing",
     true},
    {"server", "shards", &server_config::shards, 1, 0xFFFFFFFEull,
     "shards of the data dir; fixed once the dir exists"},
    {"server", "listen", &server_config::listen, 0, 0, "host:port for workers and clients"},
    {"server", "admin_listen", &server_config::admin_listen, 0, 0,
     "host:port of the admin HTTP server"},
    {"server", "http_listen", &server_config::http_listen, 0, 0,
     "host:port of the HTTP API for clients (/v1/workflows/...); empty = off"},
    {"server", "inspect_listen", &server_config::inspect_listen, 0, 0,
     "host:port where `fusee inspect` reaches the node's inspector (CAF middleman); empty = off"},
    {"server", "advertise", &server_config::advertise, 0, 0,
     "address put in invocation bodies; empty = listen"},
    {"server", "segment_mb", &server_config::segment_mb, 1, 4096,
     "size of each preallocated log segment file, in MiB"},
    {"liveness", "ping_interval_ms", &server_config::ping_interval_ms, 1, u32_max,
     "how often a worker must send a frame"},
    {"liveness", "timeout_ms", &server_config::timeout_ms, 2, u32_max,
     "silence after which a worker's leases are revoked; more than ping_interval_ms"},
    {"invoker", "park_ms", &server_config::park_ms, 1, u32_max,
     "the longest a call or message waits for a holder"},
    {"invoker", "close_grace_ms", &server_config::close_grace_ms, 0, u32_max,
     "after a 2xx, how long before an invocation's leases are revoked"},
    {"tls", "cert_file", &server_config::tls_cert_file, 0, 0,
     "this node's certificate chain (PEM): TLS 1.3 on listen, http_listen and admin_listen", true},
    {"tls", "key_file", &server_config::tls_key_file, 0, 0, "the certificate's key (PEM)", true},
    {"tls", "ca_file", &server_config::tls_ca_file, 0, 0,
     "when set, every client must present a certificate this CA signed (mutual TLS)", true},
    {"log", "level", &server_config::log_level, 0, 0,
     "log level: trace, debug, info, warn, error or off"},
    {"limits", "write_buffer_mb", &server_config::write_buffer_mb, 1, 65536,
     "bytes waiting to be written to one connection, in MiB, before it is ended"},
    {"limits", "max_parked_per_shard", &server_config::max_parked_per_shard, 1, u32_max,
     "calls and messages that may wait for one shard's holder; more are refused"},
    {"limits", "max_parked", &server_config::max_parked, 1, u32_max,
     "calls and messages that may wait for holders on this node; more are refused"},
    {"limits", "max_connections", &server_config::max_connections, 1, u32_max,
     "worker and client connections open at once; more are refused"},
    {"limits", "max_connections_per_peer", &server_config::max_connections_per_peer, 1, u32_max,
     "... from one peer address"},
    {"limits", "hello_timeout_ms", &server_config::hello_timeout_ms, 100, u32_max,
     "a connection that has not said HELLO (or CLIENT_HELLO, after AUTH) this long is closed"},
    {"limits", "frame_timeout_ms", &server_config::frame_timeout_ms, 100, u32_max,
     "a frame begun and not finished this long closes its connection"},
    {"limits", "max_frame_mb", &server_config::max_frame_mb, 1, 96,
     "largest frame body accepted, in MiB (PROTOCOL.md allows 96)"},
    {"limits", "http_body_kb", &server_config::http_body_kb, 1, 1048576,
     "largest HTTP API request body, in KiB; more is answered 413"},
};

const setting<endpoint_config> endpoint_settings[] = {
    {"endpoint", "url", &endpoint_config::url, 0, 0, "http:// or https:// URL to POST to"},
    {"endpoint", "types", &endpoint_config::types, 0, 0,
     "workflow types it has code for; empty = every type"},
    {"endpoint", "secret_file", &endpoint_config::secret_file, 0, 0,
     "file holding the HMAC secret (required unless mutual TLS)", true},
    {"endpoint", "concurrency", &endpoint_config::concurrency, 1, u32_max,
     "invocations in flight at once"},
    {"endpoint", "budget_ms", &endpoint_config::budget_ms, 1, u32_max,
     "how long one invocation may run"},
    {"endpoint", "max_shards", &endpoint_config::max_shards, 0, u32_max,
     "shards per invocation; 0 = no limit"},
    {"endpoint", "grace_ms", &endpoint_config::grace_ms, 0, u32_max,
     "how much longer than the budget to wait for an answer before fencing"},
    {"endpoint", "ca_file", &endpoint_config::ca_file, 0, 0, "https: CA of the endpoint", true},
    {"endpoint", "cert_file", &endpoint_config::cert_file, 0, 0,
     "https: client certificate for mutual TLS", true},
    {"endpoint", "key_file", &endpoint_config::key_file, 0, 0, "https: client key for mutual TLS",
     true},
};

const setting<token_config> token_settings[] = {
    {"token", "name", &token_config::name, 0, 0, "names the token in logs and metrics"},
    {"token", "scope", &token_config::scope, 0, 0,
     "worker (hold shards, any call), client (calls only) or read (describe, result, admin)"},
    {"token", "file", &token_config::file, 0, 0,
     "file holding the token (its bytes less trailing CR/LF, at least 16 bytes); reread on SIGHUP",
     true},
};

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

template <class C, size_t N>
const setting<C>* find(const setting<C> (&table)[N], std::string_view tname, std::string_view key) {
  for (auto& s : table)
    if (tname == s.table && key == s.key) return &s;
  return nullptr;
}

std::string where(const std::string& file, const toml::node& n) {
  std::ostringstream out;
  out << file << ":" << n.source().begin.line;
  return out.str();
}

/// Stores `node` into the field `s` names; an error names the file, line and key.
template <class C>
std::optional<std::string> apply(const setting<C>& s, const toml::node& node, C& cfg,
                                 const std::string& file, const fs::path& base,
                                 const std::string& name) {
  auto wrong = [&](const char* want) {
    return where(file, node) + ": `" + name + "` has the wrong type (expected " + want + ")";
  };
  return std::visit(
      [&](auto member) -> std::optional<std::string> {
        using T = std::remove_reference_t<decltype(cfg.*member)>;
        if constexpr (std::is_same_v<T, std::string>) {
          auto v = node.template value<std::string>();
          if (!v || !node.is_string()) return wrong("a string");
          cfg.*member = s.is_path && !v->empty() && !base.empty() && fs::path(*v).is_relative()
                            ? (base / *v).string()
                            : *v;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          auto* arr = node.as_array();
          if (arr == nullptr) return wrong("an array of strings");
          T out;
          for (auto& el : *arr) {
            auto v = el.template value<std::string>();
            if (!v || !el.is_string()) return wrong("an array of strings");
            out.push_back(*v);
          }
          cfg.*member = std::move(out);
        } else {
          auto v = node.template value<int64_t>();
          if (!v || !node.is_integer()) return wrong("an integer");
          if (*v < 0 || static_cast<uint64_t>(*v) < s.min || static_cast<uint64_t>(*v) > s.max)
            return where(file, node) + ": `" + name + "` = " + std::to_string(*v) + " is outside " +
                   std::to_string(s.min) + ".." + std::to_string(s.max);
          cfg.*member = static_cast<T>(*v);
        }
        return std::nullopt;
      },
      s.target);
}

template <class C, size_t N>
std::optional<std::string> check_ranges(const setting<C> (&table)[N], const C& cfg,
                                        const std::string& prefix) {
  for (auto& s : table) {
    uint64_t v = 0;
    bool numeric = true;
    if (auto* m32 = std::get_if<uint32_t C::*>(&s.target))
      v = cfg.**m32;
    else if (auto* m64 = std::get_if<uint64_t C::*>(&s.target))
      v = cfg.**m64;
    else
      numeric = false;
    if (numeric && (v < s.min || v > s.max))
      return "`" + prefix + s.table + "." + s.key + "` = " + std::to_string(v) + " is outside " +
             std::to_string(s.min) + ".." + std::to_string(s.max);
  }
  return std::nullopt;
}

template <class C, size_t N>
void describe(std::ostringstream& out, const setting<C> (&table)[N], const char* open) {
  C defaults;
  for (auto& s : table) {
    out << open << s.table << (open[1] == '[' ? "]] " : "] ") << s.key << " = ";
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(defaults.*member)>;
          if constexpr (std::is_same_v<T, std::string>)
            out << '"' << defaults.*member << '"';
          else if constexpr (std::is_same_v<T, std::vector<std::string>>)
            out << "[]";
          else
            out << defaults.*member << "  (" << s.min << ".." << s.max << ")";
        },
        s.target);
    out << "\n    " << s.description << "\n";
  }
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

/// [cluster] with node, cluster_listen and [[cluster.nodes]] (name, cluster, listen, http,
/// shards = "A-B, C"); the map is checked by validate(), which knows the shard count.
std::optional<std::string> read_cluster(const std::string& file, const toml::node& table_node,
                                        server_config& cfg) {
  auto* tbl = table_node.as_table();
  if (tbl == nullptr) return where(file, table_node) + ": `cluster` must be a table ([cluster])";
  cfg.clustered = true;
  auto string_of = [&](const toml::node& n, const std::string& key,
                       std::string& out) -> std::optional<std::string> {
    auto v = n.value<std::string>();
    if (!v) return where(file, n) + ": `" + key + "` must be a string";
    out = *v;
    return std::nullopt;
  };
  for (auto&& [key_name, node] : *tbl) {
    std::string key{key_name.str()};
    if (key == "node") {
      if (auto err = string_of(node, "cluster.node", cfg.cluster_node)) return err;
    } else if (key == "cluster_listen") {
      if (auto err = string_of(node, "cluster.cluster_listen", cfg.cluster_listen)) return err;
    } else if (key == "peer_timeout_ms") {
      auto v = node.value<int64_t>();
      if (!v || !node.is_integer() || *v < 100 || *v > 600000)
        return where(file, node) + ": `cluster.peer_timeout_ms` must be an integer in 100..600000";
      cfg.cluster_peer_timeout_ms = static_cast<uint32_t>(*v);
    } else if (key == "nodes") {
      auto* arr = node.as_array();
      if (arr == nullptr || !arr->is_array_of_tables())
        return where(file, node) + ": `cluster.nodes` must be written as [[cluster.nodes]] tables";
      for (auto& entry : *arr) {
        proto::cluster_node n;
        bool has_shards = false;
        for (auto&& [k, v] : *entry.as_table()) {
          std::string field{k.str()}, full = "cluster.nodes." + field;
          std::optional<std::string> err;
          if (field == "name") {
            err = string_of(v, full, n.name);
          } else if (field == "cluster") {
            err = string_of(v, full, n.cluster);
          } else if (field == "listen") {
            err = string_of(v, full, n.listen);
          } else if (field == "http") {
            err = string_of(v, full, n.http);
          } else if (field == "shards") {
            std::string text;
            if ((err = string_of(v, full, text))) return err;
            auto ranges = proto::parse_shard_ranges(text);
            if (!ranges) return where(file, v) + ": `" + full + "`: " + ranges.err().message;
            n.shards = std::move(*ranges);
            has_shards = true;
          } else {
            return where(file, v) + ": unknown key `" + full +
                   "` (expected name, cluster, listen, http, shards)";
          }
          if (err) return err;
        }
        if (!has_shards)
          return where(file, entry) + ": [[cluster.nodes]] \"" + n.name + "\" has no `shards`";
        cfg.cluster.nodes.push_back(std::move(n));
      }
    } else {
      return where(file, node) + ": unknown key `cluster." + key +
             "` (expected node, cluster_listen, peer_timeout_ms and [[cluster.nodes]])";
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> load_toml(const std::string& file, server_config& cfg) {
  toml::table root;
  try {
    root = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    std::ostringstream out;
    out << file << ":" << e.source().begin.line << ": " << e.description();
    return out.str();
  }
  auto base = fs::path(file).parent_path();
  for (auto&& [table_name, table_node] : root) {
    std::string tname{table_name.str()};
    if (tname == "endpoint") {
      auto* arr = table_node.as_array();
      if (arr == nullptr || !arr->is_array_of_tables())
        return where(file, table_node) + ": `endpoint` must be written as [[endpoint]] tables";
      for (auto& ep_node : *arr) {
        endpoint_config ep;
        for (auto&& [key_name, node] : *ep_node.as_table()) {
          std::string key{key_name.str()};
          auto* s = find(endpoint_settings, tname, key);
          if (s == nullptr)
            return where(file, node) + ": unknown key `endpoint." + key + "` in [[endpoint]]";
          if (auto err = apply(*s, node, ep, file, base, "endpoint." + key)) return err;
        }
        cfg.endpoints.push_back(std::move(ep));
      }
      continue;
    }
    if (tname == "token") {
      auto* arr = table_node.as_array();
      if (arr == nullptr || !arr->is_array_of_tables())
        return where(file, table_node) + ": `token` must be written as [[token]] tables";
      for (auto& t_node : *arr) {
        token_config t;
        for (auto&& [key_name, node] : *t_node.as_table()) {
          std::string key{key_name.str()};
          auto* s = find(token_settings, tname, key);
          if (s == nullptr)
            return where(file, node) + ": unknown key `token." + key +
                   "` in [[token]] (expected name, scope, file)";
          if (auto err = apply(*s, node, t, file, base, "token." + key)) return err;
        }
        cfg.tokens.push_back(std::move(t));
      }
      continue;
    }
    if (tname == "cluster") {
      if (auto err = read_cluster(file, table_node, cfg)) return err;
      continue;
    }
    auto* tbl = table_node.as_table();
    if (tbl == nullptr)
      return where(file, table_node) + ": unknown key `" + tname +
             "` (expected [server], [liveness], [invoker], [limits], [tls], [cluster], "
             "[[endpoint]] "
             "or [[token]])";
    for (auto&& [key_name, node] : *tbl) {
      std::string key{key_name.str()};
      auto* s = find(server_settings, tname, key);
      if (s == nullptr) return where(file, node) + ": unknown key `" + tname + "." + key + "`";
      if (auto err = apply(*s, node, cfg, file, base, tname + "." + key)) return err;
    }
  }
  return std::nullopt;
}

std::optional<std::string> validate(server_config& cfg) {
  if (auto err = check_ranges(server_settings, cfg, "")) return err;
  if (cfg.timeout_ms <= cfg.ping_interval_ms)
    return "`liveness.timeout_ms` (" + std::to_string(cfg.timeout_ms) +
           ") must be greater than `liveness.ping_interval_ms` (" +
           std::to_string(cfg.ping_interval_ms) + ")";
  if (!parse_host_port(cfg.listen))
    return "`server.listen` = \"" + cfg.listen + "\" is not host:port";
  if (!parse_host_port(cfg.admin_listen))
    return "`server.admin_listen` = \"" + cfg.admin_listen + "\" is not host:port";
  if (!cfg.http_listen.empty() && !parse_host_port(cfg.http_listen))
    return "`server.http_listen` = \"" + cfg.http_listen + "\" is not host:port";
  if (!cfg.inspect_listen.empty() && !parse_host_port(cfg.inspect_listen))
    return "`server.inspect_listen` = \"" + cfg.inspect_listen + "\" is not host:port";
  if (!server::logging::parse_level(cfg.log_level))
    return "`log.level` = \"" + cfg.log_level +
           "\" is not one of trace, debug, info, warn, error, off";
  if (!cfg.advertise.empty() && !parse_host_port(cfg.advertise))
    return "`server.advertise` = \"" + cfg.advertise + "\" is not host:port";
  if (cfg.data_dir.empty()) return "`server.data_dir` is empty";
  if (cfg.clustered) {
    if (auto err = proto::check_cluster_map(cfg.cluster, cfg.shards)) return "[cluster]: " + *err;
    if (cfg.cluster_node.empty()) return "[cluster]: `cluster.node` (this node's name) is required";
    if (std::none_of(cfg.cluster.nodes.begin(), cfg.cluster.nodes.end(),
                     [&](auto& n) { return n.name == cfg.cluster_node; }))
      return "[cluster]: `cluster.node` = \"" + cfg.cluster_node +
             "\" is not a node of the map ([[cluster.nodes]])";
    if (cfg.cluster_listen.empty())  // bind where the map says the others dial
      for (auto& n : cfg.cluster.nodes)
        if (n.name == cfg.cluster_node) cfg.cluster_listen = n.cluster;
    if (!parse_host_port(cfg.cluster_listen))
      return "[cluster]: `cluster.cluster_listen` = \"" + cfg.cluster_listen +
             "\" is not host:port";
    for (size_t a = 0; a < cfg.cluster.nodes.size(); ++a)  // one address, one node
      for (size_t b = 0; b < a; ++b) {
        auto& x = cfg.cluster.nodes[a];
        auto& y = cfg.cluster.nodes[b];
        for (auto [field, mine, theirs] : {std::tuple{"cluster", &x.cluster, &y.cluster},
                                           std::tuple{"listen", &x.listen, &y.listen}})
          if (*mine == *theirs)
            return "[cluster]: node \"" + x.name + "\": `" + field + "` = \"" + *mine +
                   "\" is also node \"" + y.name + "\"'s";
      }
    for (auto& n : cfg.cluster.nodes) {
      auto which = "[cluster]: node \"" + n.name + "\": ";
      if (!parse_host_port(n.cluster))
        return which + "`cluster` = \"" + n.cluster + "\" is not host:port";
      if (!parse_host_port(n.listen))
        return which + "`listen` = \"" + n.listen + "\" is not host:port";
      if (!n.http.empty() && !parse_host_port(n.http))
        return which + "`http` = \"" + n.http + "\" is not host:port";
    }
  }
  if (auto tokens = server::read_tokens(cfg.tokens); !tokens) return tokens.err().message;
  if (cfg.tls_cert_file.empty() != cfg.tls_key_file.empty())
    return "[tls]: `tls.cert_file` and `tls.key_file` go together";
  if (!cfg.tls_ca_file.empty() && cfg.tls_cert_file.empty())
    return "[tls]: `tls.ca_file` (client certificates) needs `tls.cert_file` and `tls.key_file`";
  if (!cfg.tls_cert_file.empty())
    if (auto ctx = tls::server_context({cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_ca_file});
        !ctx)
      return "[tls]: " + ctx.err().message;
  if (!cfg.tokens.empty() && !cfg.inspect_listen.empty() &&
      !is_loopback_host(parse_host_port(cfg.inspect_listen)->host))
    return "`server.inspect_listen` = \"" + cfg.inspect_listen +
           "\" is reachable from other hosts, but `fusee inspect`'s CAF link cannot check "
           "tokens: bind it to 127.0.0.1, or set it to \"\" and read the admin API's /v1 views "
           "with a read token";
  for (size_t i = 0; i < cfg.endpoints.size(); ++i) {
    auto& ep = cfg.endpoints[i];
    std::string which = "[[endpoint]] #" + std::to_string(i + 1) +
                        (ep.url.empty() ? std::string{} : " (" + ep.url + ")") + ": ";
    if (auto err = check_ranges(endpoint_settings, ep, "")) return which + *err;
    if (ep.url.empty()) return which + "`endpoint.url` is required";
    bool https = starts_with(ep.url, "https://");
    if (!https && !starts_with(ep.url, "http://"))
      return which + "`endpoint.url` must start with http:// or https://";
    if (!https && (!ep.ca_file.empty() || !ep.cert_file.empty() || !ep.key_file.empty()))
      return which + "`endpoint.ca_file`, `cert_file` and `key_file` need an https:// url";
    if (ep.cert_file.empty() != ep.key_file.empty())
      return which + "`endpoint.cert_file` and `endpoint.key_file` go together";
    for (auto* f : {&ep.ca_file, &ep.cert_file, &ep.key_file})
      if (!f->empty() && !fs::exists(*f)) return which + "file " + *f + " does not exist";
    bool mutual_tls = !ep.cert_file.empty();
    if (ep.secret_file.empty()) {
      if (!mutual_tls)
        return which + "`endpoint.secret_file` is required unless the endpoint uses mutual TLS";
      continue;
    }
    auto secret = client::read_secret_file(ep.secret_file);
    if (!secret) return which + "`endpoint.secret_file`: " + secret.err().message;
    ep.secret = std::move(*secret);
  }
  return std::nullopt;
}

std::string describe_settings() {
  std::ostringstream out;
  describe(out, server_settings, "[");
  describe(out, endpoint_settings, "[[");
  describe(out, token_settings, "[[");
  return out.str();
}

}  // namespace fusee::app
