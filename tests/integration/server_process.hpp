// Starts a real `fusee server` on a temporary data dir and an ephemeral loopback port, and
// cleans up after itself. Used by the integration tests.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "client/connection.hpp"
#include "curl_request.hpp"

namespace fusee::test {

/// A temporary directory removed on destruction.
class temp_dir {
public:
  temp_dir();
  ~temp_dir();
  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
};

class server_process {
public:
  /// `extra_toml` is appended to a config file holding nothing else.
  explicit server_process(std::filesystem::path data_dir, std::string extra_toml = "",
                          std::vector<std::string> extra_args = {});
  ~server_process();

  /// Starts the process and waits until it serves (or fails: the returned text says why).
  std::string start();
  /// SIGKILL and reap.
  void kill9();
  /// SIGTERM and reap; returns the exit status.
  int stop();
  /// Waits for the process to exit by itself (e.g. after a refused start); returns its status.
  int wait_exit(std::chrono::milliseconds timeout);
  bool running() const { return pid_ > 0; }
  int pid() const { return pid_; }

  uint16_t port() const { return port_; }
  uint16_t admin_port() const { return admin_port_; }
  uint16_t http_port() const { return http_port_; }
  uint16_t inspect_port() const { return inspect_port_; }
  /// Every later start() listens on the same ports (workers reconnect to the same address):
  /// the ones a start before got, else ones from free_port(), which nothing else takes while
  /// the server is down. Call it before the first start() for that.
  void keep_ports() { keep_ports_ = true; }
  /// Listens on these worker and HTTP API ports (0: any) from the next start() on, and keeps
  /// every port after that, as keep_ports() does (a cluster's map names its nodes' ports).
  void use_ports(uint16_t listen, uint16_t http) {
    port_ = listen;
    http_port_ = http;
    keep_ports_ = true;
  }
  /// A connection to the server; `receive_buffer` as in client::connection::open.
  client::connection connect(int receive_buffer = 0) const;
  /// The server's stderr so far.
  std::string log() const;

private:
  std::filesystem::path data_dir_;
  std::string extra_toml_;
  std::vector<std::string> extra_args_;
  int pid_ = -1;
  uint16_t port_ = 0;
  uint16_t admin_port_ = 0;
  uint16_t http_port_ = 0;
  uint16_t inspect_port_ = 0;
  bool keep_ports_ = false;
  std::filesystem::path work_;
};

/// Starts `args` (args[0] is the binary) as a child process with stdout and stderr appended to
/// `log_path`; returns its pid.
int spawn_process(std::vector<std::string> args, const std::filesystem::path& log_path);

/// Runs `args` to its end, with stdout and stderr to `log_path` (truncated first), killing it
/// after `timeout`: the exit code (-1 if killed or signalled) and what it printed.
std::pair<int, std::string> run_process(std::vector<std::string> args,
                                        const std::filesystem::path& log_path,
                                        std::chrono::milliseconds timeout);

/// Appends `options` to a colon-separated environment variable (ASAN_OPTIONS, UBSAN_OPTIONS)
/// for the processes started while it lives; restores the old value after.
class scoped_env {
public:
  scoped_env(std::string name, const std::string& options);
  ~scoped_env();
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

private:
  std::string name_;
  std::optional<std::string> old_;
};

/// A loopback TCP port that was free a moment ago (bound, then released): for configs that must
/// name their ports before any process starts, and for servers that restart on their ports.
/// Picked at random below the kernel's ephemeral range, so that while its server is down no
/// outgoing connection or port-0 listener of a test running beside this one takes it. Never one
/// this process was given before (two nodes of one config on the same port are refused).
uint16_t free_port();

/// The fusee binary under test (set by CMake).
std::string fusee_binary();

}  // namespace fusee::test
