// The node's log lines, through spdlog: one line per event, a message then key=value fields
// (shard=, endpoint=, invocation=, session=), UTC timestamps, a level. Every thread may log.
// Secrets are never passed here: endpoints are named by URL, never by their secret file's bytes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

namespace fusee::server::logging {

/// Sets up the default logger: stderr at `level`, plus a ring of the last warnings and errors
/// for the dashboard. Call once, before threads start logging.
void init(spdlog::level::level_enum level);

/// "trace", "debug", "info", "warn" (or "warning"), "error", "off".
std::optional<spdlog::level::level_enum> parse_level(std::string_view name);

/// The last warnings and errors (oldest first), as formatted lines.
std::vector<std::string> recent_problems();

/// `url` as it may be shown in logs, metrics and introspection: without user:password@ and
/// without its ?query or #fragment (either may carry a credential).
std::string display_url(std::string_view url);

/// `s` quoted for a key="value" field, on one line whatever a peer put in it: quotes and
/// backslashes escaped, \n, \r and \t as such, other control bytes as \xNN.
std::string quoted(std::string_view s);

/// A warning that can repeat at will (a peer's refused token or connection over a limit, a host
/// not allowed, many shards without progress at once): logged as a warning once a minute per
/// `key` (say, the reason and the peer's address), at debug the other times, so a flood cannot
/// fill the log (one warning_limiter for the node's such warnings). Any thread.
void warn_limited(const std::string& key, const std::string& line);

}  // namespace fusee::server::logging
