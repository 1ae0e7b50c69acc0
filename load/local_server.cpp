#include "load/local_server.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "load/interruption.hpp"

namespace fusee::load {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

std::string log_excerpt(const std::string& log, size_t keep) {
  auto tail = [&](const std::string& s) { return s.size() > keep ? s.substr(s.size() - keep) : s; };
  // A sanitizer's report names the error and where it happened in its first lines, and its
  // stacks can be longer than the tail.
  size_t at = std::string::npos;
  for (const char* mark : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                           "WARNING: ThreadSanitizer", "runtime error:"})
    at = std::min(at, log.find(mark));
  if (at == std::string::npos || log.size() - at <= keep) return tail(log);
  size_t line = log.rfind('\n', at);
  line = line == std::string::npos ? 0 : line + 1;
  return log.substr(line, keep) + "\n[...]\n" + tail(log);
}

std::string local_server::log_tail() const {
  std::ifstream in(dir_ / "server.log");
  std::string all{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return log_excerpt(all, 4000);
}

std::string local_server::prepare() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string{tmp && *tmp ? tmp : "/tmp"} + "/fusee-load-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return "cannot make a temporary directory " + tmpl + ": " + std::strerror(errno);
  dir_ = tmpl;
  return {};
}

std::string local_server::start(const std::string& binary, uint32_t shards,
                                const std::string& toml) {
  binary_ = binary;
  shards_ = shards;
  std::ofstream(dir_ / "fusee.toml") << toml;
  return launch("127.0.0.1:0", "127.0.0.1:0");
}

std::string local_server::restart() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  return launch(listen_, admin_);
}

std::string local_server::launch(const std::string& listen_at, const std::string& admin_at) {
  auto ready = dir_ / "ready";
  fs::remove(ready);
  // Everything the child needs is built before fork(): other threads run (workers), so the
  // child may only call async-signal-safe functions until exec.
  std::vector<std::string> args{binary_,
                                "server",
                                "--config",
                                (dir_ / "fusee.toml").string(),
                                "--data-dir",
                                (dir_ / "data").string(),
                                "--shards",
                                std::to_string(shards_),
                                "--listen",
                                listen_at,
                                "--admin-listen",
                                admin_at,
                                "--http-listen",
                                "off",
                                "--inspect-listen",
                                "off",
                                "--ready-file",
                                ready.string()};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  int log = ::open((dir_ / "server.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return "cannot open " + (dir_ / "server.log").string();
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(log);
    return "fork failed";
  }
  if (pid_ == 0) {
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log);
  auto deadline = clock_type::now() + std::chrono::seconds(30);
  while (clock_type::now() < deadline) {
    if (interrupted()) return "interrupted while the server started";
    if (fs::exists(ready)) {
      std::ifstream in(ready);
      std::string line;
      while (std::getline(in, line)) {
        if (line.rfind("listen=", 0) == 0) listen_ = line.substr(7);
        if (line.rfind("admin=", 0) == 0) admin_ = line.substr(6);
      }
      return {};
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return "the server exited at start; its log is " + (dir_ / "server.log").string();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // awaiting a file
  }
  return "the server did not start within 30 s";
}

local_server::~local_server() {
  if (pid_ > 0) {  // SIGTERM, then SIGKILL if it is not gone within 10 s
    ::kill(pid_, SIGTERM);
    int status = 0;
    auto deadline = clock_type::now() + std::chrono::seconds(10);
    while (::waitpid(pid_, &status, WNOHANG) != pid_) {
      if (clock_type::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // awaiting an exit
    }
  }
  if (dir_.empty()) return;
  if (auto* keep = std::getenv("FUSEE_LOAD_KEEP"); keep && *keep && std::string_view{keep} != "0") {
    std::fprintf(stderr, "fusee load: kept %s (FUSEE_LOAD_KEEP)\n", dir_.c_str());
    return;
  }
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

namespace {
size_t append_to_string(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}
}  // namespace

std::map<std::string, double> scrape_metrics(const std::string& admin) {
  std::map<std::string, double> out;
  if (admin.empty()) return out;
  CURL* c = curl_easy_init();
  std::string body;
  auto url = "http://" + admin + "/metrics";
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_to_string);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  bool ok = curl_easy_perform(c) == CURLE_OK;
  curl_easy_cleanup(c);
  if (!ok) return out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.find("_bucket{") != std::string::npos) continue;
    auto sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

uint64_t resident_bytes(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  return 0;
}

}  // namespace fusee::load
