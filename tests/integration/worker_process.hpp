// A `fusee worker` process (the demo workflows) on loopback, killed on destruction, and the small
// waits the process tests share.
#pragma once

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>

#include "server_process.hpp"

namespace fusee::test {

using namespace std::chrono_literals;

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Waits for `cond` (checked every 10 ms) up to `limit`.
template <class F>
bool await(F cond, std::chrono::milliseconds limit = 15s) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

/// A `fusee worker` process; FUSEE_TRACE_FILE is inherited from the test.
struct worker_process {
  temp_dir dir;
  int pid = -1;
  worker_process(uint16_t server_port, const std::string& name,
                 std::vector<std::string> extra = {}) {
    std::vector<std::string> args{fusee_binary(), "worker",
                                  "--server",     "127.0.0.1:" + std::to_string(server_port),
                                  "--name",       name};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = spawn_process(args, dir.path() / "worker.log");
  }
  ~worker_process() { kill9(); }
  /// SIGTERM; the exit status once it is gone (-1 if it is still running after `limit`).
  int terminate(std::chrono::milliseconds limit = 10s) {
    ::kill(pid, SIGTERM);
    int status = 0;
    bool gone = await([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, limit);
    if (!gone) return -1;
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void kill9() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  std::string log() const { return read_file(dir.path() / "worker.log"); }
  bool logged(const std::string& text, std::chrono::milliseconds limit = 15s) const {
    return await([&] { return log().find(text) != std::string::npos; }, limit);
  }
};

}  // namespace fusee::test
