// The server's settings (DESIGN.md §8 names): the table of config.cpp points into the server's
// own structs, which hold the defaults; read from a TOML file and overridden by flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/node_settings.hpp"
#include "client/address.hpp"

namespace fusee::app {

/// The settings and their defaults are the server's own structs (actors/node_settings.hpp);
/// this module reads them from TOML, checks them and describes them.
using server_config = server::node_settings;
using endpoint_config = server::endpoint_settings;
using token_config = server::token_settings;

using client::host_port;
using client::parse_host_port;

/// Reads `file` (TOML) into `cfg`, resolving relative paths against the file's directory.
/// Returns an error naming the key and the file on unknown keys, wrong types or bad ranges.
std::optional<std::string> load_toml(const std::string& file, server_config& cfg);
/// As load_toml(), from text named `name` in errors; relative paths stay relative.
std::optional<std::string> load_toml_text(std::string_view text, const std::string& name,
                                          server_config& cfg);

/// Checks ranges and cross-setting rules and reads each endpoint's secret file; the message
/// names the setting (and the endpoint, by position and url).
std::optional<std::string> validate(server_config& cfg);

/// One line per setting: "[server] shards = 16  -- shards of the data dir (1..5033163)".
std::string describe_settings();

}  // namespace fusee::app
