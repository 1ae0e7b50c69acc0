#include "logging/logging.hpp"

#include <memory>
#include <mutex>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "logging/warning_limiter.hpp"

namespace fusee::server::logging {

namespace {

constexpr const char* pattern = "%Y-%m-%dT%H:%M:%S.%eZ %-7l %v";

std::mutex ring_mtx;
std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> ring;

}  // namespace

void init(spdlog::level::level_enum level) {
  auto err = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  err->set_level(level);
  auto r = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100);
  r->set_level(spdlog::level::warn);
  auto logger = std::make_shared<spdlog::logger>("fusee", spdlog::sinks_init_list{err, r});
  logger->set_pattern(pattern, spdlog::pattern_time_type::utc);
  logger->set_level(std::min(level, spdlog::level::warn));
  logger->flush_on(spdlog::level::trace);  // stderr is unbuffered anyway; lines are whole
  spdlog::set_default_logger(logger);
  std::lock_guard<std::mutex> lk{ring_mtx};
  ring = r;
}

std::optional<spdlog::level::level_enum> parse_level(std::string_view name) {
  if (name == "warn") return spdlog::level::warn;  // spdlog itself spells it "warning"
  for (auto l : {spdlog::level::trace, spdlog::level::debug, spdlog::level::info,
                 spdlog::level::warn, spdlog::level::err, spdlog::level::off}) {
    auto n = spdlog::level::to_string_view(l);
    if (std::string_view(n.data(), n.size()) == name) return l;
  }
  if (name == "error") return spdlog::level::err;
  return std::nullopt;
}

std::vector<std::string> recent_problems() {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> r;
  {
    std::lock_guard<std::mutex> lk{ring_mtx};
    r = ring;
  }
  if (!r) return {};
  auto lines = r->last_formatted();
  for (auto& l : lines)
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r'))
      l.pop_back();
  return lines;
}

std::string display_url(std::string_view url) {
  auto cut = url.find_first_of("?#");
  if (cut != std::string_view::npos) url = url.substr(0, cut);
  auto scheme = url.find("://");
  auto host = scheme == std::string_view::npos ? 0 : scheme + 3;
  auto path = url.find('/', host);
  auto at = url.rfind('@', path == std::string_view::npos ? url.size() : path);
  if (at != std::string_view::npos && at >= host)
    return std::string(url.substr(0, host)) + std::string(url.substr(at + 1));
  return std::string(url);
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  return out + "\"";
}

void warn_limited(const std::string& key, const std::string& line) {
  static warning_limiter node_wide;
  node_wide.warn(key, line);
}

}  // namespace fusee::server::logging
