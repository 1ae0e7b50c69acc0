// The tokens a node accepts ([[token]]), shared by the sessions and the HTTP servers. Read from
// their files at start and again on SIGHUP; connections already authenticated keep their scope.
// Threading: any thread may read and count; reload() replaces the set atomically.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/node_settings.hpp"
#include "protocol/auth.hpp"
#include "protocol/result.hpp"

namespace fusee::server {

/// Reads and checks every token (names unique and non-empty, scope known, the file's secret at
/// least 16 bytes); an error names the token and its file, never a secret.
proto::result<std::vector<proto::token>> read_tokens(const std::vector<token_settings>& settings);

class token_store {
public:
  using token_list = std::vector<proto::token>;

  /// Reads the tokens; no settings = an open node (required() is false).
  static proto::result<std::shared_ptr<token_store>> load(std::vector<token_settings> settings);

  /// True when connections and HTTP requests must prove a token.
  bool required() const { return !settings_.empty(); }
  std::shared_ptr<const token_list> tokens() const { return tokens_.load(); }

  /// Rereads every file. On an error the tokens in use stay as they were.
  proto::result<size_t> reload();

  /// Counts a refused connection or request (fusee_auth_refused_total).
  void count_refusal() { refused_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  uint64_t reloads() const { return reloads_.load(std::memory_order_relaxed); }

private:
  std::vector<token_settings> settings_;
  std::atomic<std::shared_ptr<const token_list>> tokens_;
  std::atomic<uint64_t> refused_{0}, reloads_{0};
};

}  // namespace fusee::server
