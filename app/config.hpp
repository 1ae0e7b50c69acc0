// The server's settings (DESIGN.md §8 names): the table of config.cpp points into the server's
// own structs, which hold the defaults; read from a TOML file and overridden by flags.
#pragma once

#include <cstdint>
#include <map>
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

/// Where each setting given came from, for validate()'s errors: "file:line" (or a flag, as
/// "--log-level"), by key ("log.level"), by array table entry ("[[endpoint]] #2") and for the
/// cluster table ("[cluster]").
using setting_origins = std::map<std::string, std::string>;

/// Reads `file` (TOML) into `cfg`, resolving relative paths against the file's directory, and
/// notes in `origins` (if given) where each setting is. Returns an error naming the key and the
/// file on unknown keys, wrong types or bad ranges.
std::optional<std::string> load_toml(const std::string& file, server_config& cfg,
                                     setting_origins* origins = nullptr);
/// As load_toml(), from text named `name` in errors; relative paths stay relative.
std::optional<std::string> load_toml_text(std::string_view text, const std::string& name,
                                          server_config& cfg, setting_origins* origins = nullptr);

/// Checks ranges and cross-setting rules and reads each endpoint's secret file; the message
/// names the setting (and the endpoint, by position and url), led by where that setting was
/// given when `origins` knows ("/etc/fusee.toml:12: `log.level` = ...").
std::optional<std::string> validate(server_config& cfg, const setting_origins& origins = {});

/// One line per setting: "[server] shards = 16  -- shards of the data dir (1..5033163)".
std::string describe_settings();

}  // namespace fusee::app
