// A `fusee handler` process on an ephemeral loopback port (echo mode unless `extra` names a
// --mode), killed on destruction. Its secret is "s3cret-s3cret-s3cret"; its stderr is log().
#pragma once

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <sys/wait.h>

#include "server_process.hpp"

namespace fusee::test {

struct handler_process {
  temp_dir dir;
  int pid = -1;
  uint16_t port = 0;
  explicit handler_process(std::vector<std::string> extra = {}, uint16_t want_port = 0) {
    auto secret = dir.path() / "secret";
    std::ofstream(secret) << "s3cret-s3cret-s3cret\n";
    auto ready = dir.path() / "ready";
    std::vector<std::string> args{
        fusee_binary(),  "handler",       "--listen",     "127.0.0.1:" + std::to_string(want_port),
        "--secret-file", secret.string(), "--ready-file", ready.string()};
    if (std::find(extra.begin(), extra.end(), "--mode") == extra.end())
      args.insert(args.end(), {"--mode", "echo"});
    args.insert(args.end(), extra.begin(), extra.end());
    pid = spawn_process(args, dir.path() / "handler.log");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!std::filesystem::exists(ready) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::ifstream in(ready);
    std::string line;
    std::getline(in, line);
    REQUIRE_MESSAGE(!line.empty(), "fusee handler did not start");
    port = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
  }
  ~handler_process() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  std::string log() const {
    std::ifstream in(dir.path() / "handler.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

}  // namespace fusee::test
