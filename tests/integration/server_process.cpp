#include "server_process.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fusee::test {

namespace fs = std::filesystem;

scoped_env::scoped_env(std::string name, const std::string& options) : name_(std::move(name)) {
  if (auto* v = std::getenv(name_.c_str())) old_ = v;
  auto value = old_ && !old_->empty() ? *old_ + ":" + options : options;
  ::setenv(name_.c_str(), value.c_str(), 1);
}

scoped_env::~scoped_env() {
  if (old_)
    ::setenv(name_.c_str(), old_->c_str(), 1);
  else
    ::unsetenv(name_.c_str());
}

std::string fusee_binary() {
  return FUSEE_BINARY;
}

namespace {

/// The kernel's ephemeral range [first, last] (connect()'s source ports and bind(0)'s picks).
std::pair<int, int> ephemeral_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 32768, last = 60999;
  in >> first >> last;
  return {first, last};
}

/// Whether `port` on 127.0.0.1 can be bound now.
bool bindable(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("no socket for a free loopback port");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

uint16_t free_port() {
  // Below the ephemeral range: a port named in a cluster's map is freed when its node stops and
  // taken again when it restarts, and meanwhile no outgoing connection of a test running beside
  // this one may take it as its source port, nor a server listening on port 0. Tests pick at
  // random there, so two test processes rarely pick the same port (cluster3 starts again on
  // new ports when that happens).
  static std::mutex mtx;
  static std::set<uint16_t> given;
  static std::mt19937 pick(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::lock_guard<std::mutex> lk{mtx};
  auto [first, last] = ephemeral_range();
  int low = 10000, high = first - 1;
  if (high - low < 1000) {  // a machine whose ephemeral range leaves no room: above it
    low = last + 1;
    high = 65535;
  }
  if (high - low < 1000) throw std::runtime_error("no loopback port range outside the ephemeral");
  std::uniform_int_distribution<int> any(low, high);
  for (int tries = 0; tries < 1000; ++tries) {
    auto port = static_cast<uint16_t>(any(pick));
    if (!given.count(port) && bindable(port)) {
      given.insert(port);
      return port;
    }
  }
  throw std::runtime_error("no free loopback port in " + std::to_string(low) + "-" +
                           std::to_string(high));
}

int spawn_process(std::vector<std::string> args, const fs::path& log_path) {
  int pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 2);
      ::dup2(fd, 1);
    }
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::_Exit(127);
  }
  return pid;
}

std::pair<int, std::string> run_process(std::vector<std::string> args, const fs::path& log_path,
                                        std::chrono::milliseconds timeout) {
  fs::remove(log_path);
  int pid = spawn_process(std::move(args), log_path);
  int status = 0, rc = -1;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::ifstream in(log_path);
  return {rc, std::string{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()}};
}

temp_dir::temp_dir() {
  std::random_device rd;
  path_ = fs::temp_directory_path() /
          ("fusee-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
  fs::create_directories(path_);
}

temp_dir::~temp_dir() {
  if (std::getenv("FUSEE_TEST_KEEP")) {
    std::fprintf(stderr, "kept %s\n", path_.c_str());
    return;
  }
  std::error_code ec;
  fs::remove_all(path_, ec);
}

server_process::server_process(fs::path data_dir, std::string extra_toml,
                               std::vector<std::string> extra_args)
    : data_dir_(std::move(data_dir)), extra_toml_(std::move(extra_toml)),
      extra_args_(std::move(extra_args)) {
  work_ = data_dir_.parent_path() / (data_dir_.filename().string() + "-run");
  fs::create_directories(work_);
}

server_process::~server_process() {
  if (pid_ > 0) kill9();
}

std::string server_process::start() {
  auto ready = work_ / "ready";
  auto cfg = work_ / "fusee.toml";
  fs::remove(ready);
  {
    std::ofstream out(cfg);
    out << extra_toml_ << "\n";
  }
  auto log_path = work_ / "server.log";
  auto at = [&](uint16_t& port) {
    if (!keep_ports_) return std::string("127.0.0.1:0");
    if (port == 0) port = free_port();
    return "127.0.0.1:" + std::to_string(port);
  };
  std::vector<std::string> args{
      fusee_binary(),     "server",           "--config",      cfg.string(),
      "--data-dir",       data_dir_.string(), "--listen",      at(port_),
      "--admin-listen",   at(admin_port_),    "--http-listen", at(http_port_),
      "--inspect-listen", at(inspect_port_),  "--ready-file",  ready.string()};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  pid_ = spawn_process(args, log_path);
  // Await the ready file (or the process's exit), for at most 20 s.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(ready)) {
      std::ifstream in(ready);
      std::string line;
      while (std::getline(in, line)) {
        auto port = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
        if (line.rfind("listen=", 0) == 0)
          port_ = port;
        else if (line.rfind("admin=", 0) == 0)
          admin_port_ = port;
        else if (line.rfind("http=", 0) == 0)
          http_port_ = port;
        else if (line.rfind("inspect=", 0) == 0)
          inspect_port_ = port;
      }
      return {};
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return "server exited before serving: " + log();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill9();
  return "server did not become ready within 20 s: " + log();
}

void server_process::kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

int server_process::stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = wait_exit(std::chrono::seconds(10));
  if (pid_ > 0) kill9();
  return status;
}

int server_process::wait_exit(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

client::connection server_process::connect(int receive_buffer) const {
  auto c = client::connection::open("127.0.0.1", port_, receive_buffer);
  if (!c) throw std::runtime_error(c.err().message);
  return std::move(*c);
}

std::string server_process::log() const {
  std::ifstream in(work_ / "server.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace fusee::test
