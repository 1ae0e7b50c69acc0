// The `fusee server` a load run starts itself: a fresh data dir, free loopback ports, restarts
// with kill -9 on the same dir and ports; and reading a server's metrics and memory.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <string>

#include <sys/types.h>

namespace fusee::load {

/// The last `keep` bytes of a server's log; if it holds a sanitizer's report that begins before
/// them, the report's first `keep` bytes (from the start of its line) come first, then "[...]".
std::string log_excerpt(const std::string& log, size_t keep);

class local_server {
public:
  ~local_server();  ///< SIGTERM (SIGKILL after 10 s); the data dir removed unless FUSEE_LOAD_KEEP

  /// Makes the temporary directory (data dir, configuration, log); an error text on failure.
  std::string prepare();
  const std::filesystem::path& dir() const { return dir_; }
  /// Starts `binary server` with `toml` as its configuration; an error text on failure.
  std::string start(const std::string& binary, uint32_t shards, const std::string& toml);
  /// kill -9, then the same data dir on the same ports (workers reconnect to the address).
  std::string restart();

  const std::string& listen() const { return listen_; }
  const std::string& admin() const { return admin_; }
  pid_t pid() const { return pid_; }  ///< any thread (a restart changes it)
  /// The last lines of the server's log (for a failure message), after the head of a sanitizer's
  /// report if it has one (log_excerpt).
  std::string log_tail() const;

private:
  std::string launch(const std::string& listen_at, const std::string& admin_at);

  std::filesystem::path dir_;
  std::atomic<pid_t> pid_{-1};
  std::string listen_, admin_, binary_;
  uint32_t shards_ = 0;
};

/// GET http://admin/metrics; the samples by series (empty when it cannot be read).
std::map<std::string, double> scrape_metrics(const std::string& admin);

/// Resident memory of process `pid` in bytes (0 when it cannot be read).
uint64_t resident_bytes(pid_t pid);

}  // namespace fusee::load
