// The server's settings (DESIGN.md §8 names), each declared once in config.cpp with its default,
// description and bounds; read from a TOML file and overridden by flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client/address.hpp"

namespace fusee::app {

/// One `[[endpoint]]` table: an HTTP endpoint the invoker may wake.
struct endpoint_config {
  std::string url;
  std::vector<std::string> types;  ///< workflow types it has code for; empty = all
  std::string secret_file;
  std::string secret;  ///< the file's bytes less trailing CR/LF; never logged
  uint32_t concurrency = 16;
  uint32_t budget_ms = 60000;
  uint32_t max_shards = 0;  ///< 0 = no limit
  uint32_t grace_ms = 30000;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

struct server_config {
  // [server]
  std::string data_dir = "./data";
  uint32_t shards = 16;
  std::string listen = "127.0.0.1:7400";
  std::string admin_listen = "127.0.0.1:7401";
  std::string advertise;
  uint64_t segment_mb = 16;
  // [liveness]
  uint32_t ping_interval_ms = 1000;
  uint32_t timeout_ms = 5000;
  // [invoker]
  uint32_t park_ms = 30000;
  uint32_t close_grace_ms = 2000;
  // [limits]
  uint64_t write_buffer_mb = 16;
  // [[endpoint]]
  std::vector<endpoint_config> endpoints;
};

using client::host_port;
using client::parse_host_port;

/// Reads `file` (TOML) into `cfg`, resolving relative paths against the file's directory.
/// Returns an error naming the key and the file on unknown keys, wrong types or bad ranges.
std::optional<std::string> load_toml(const std::string& file, server_config& cfg);

/// Checks ranges and cross-setting rules and reads each endpoint's secret file; the message
/// names the setting (and the endpoint, by position and url).
std::optional<std::string> validate(server_config& cfg);

/// One line per setting: "[server] shards = 16  -- shards of the data dir (1..4294967294)".
std::string describe_settings();

}  // namespace fusee::app
