// Secrets (tokens, an endpoint's signing secret) never appear in logs, metrics, views, error
// messages or command output: a scripted session that uses and refuses each, then a grep.
#include <doctest/doctest.h>

#include <fstream>

#include "handler_process.hpp"
#include "server_process.hpp"

using namespace fusee;
using namespace std::chrono_literals;

TEST_CASE("no secret appears in any output of a scripted session") {
  test::temp_dir dir;
  auto at = [&](const std::string& name) { return (dir.path() / name).string(); };
  const std::vector<std::pair<std::string, std::string>> tokens{
      {"worker", "wk-5f1d2c3b4a59687766554433221100ff"},
      {"client", "cl-00112233445566778899aabbccddeeff"},
      {"read", "rd-ffeeddccbbaa99887766554433221100"}};
  std::string toml = "[server]\nshards = 2\n";
  for (auto& [scope, secret] : tokens) {
    std::ofstream{at(scope + ".token")} << secret << "\n";
    toml += "[[token]]\nname = \"" + scope + "-token\"\nscope = \"" + scope + "\"\nfile = \"" +
            at(scope + ".token") + "\"\n";
  }
  std::ofstream{at("wrong.token")} << "wr-0000000000000000000000000000000\n";
  // The invoked worker proves the worker token; the invoker signs with the handler's secret.
  test::handler_process handler(
      {"--mode", "workflows", "--linger-ms", "100", "--token-file", at("worker.token")});
  toml += "[[endpoint]]\nurl = \"http://127.0.0.1:" + std::to_string(handler.port) +
          "/\"\nsecret_file = \"" + (handler.dir.path() / "secret").string() + "\"\n";
  test::server_process server(dir.path() / "data", toml);
  REQUIRE(server.start().empty());
  auto listen = "127.0.0.1:" + std::to_string(server.port());

  std::string everything;
  int step = 0;
  auto run = [&](std::vector<std::string> args, int want_rc) {
    args.insert(args.begin(), test::fusee_binary());
    auto [rc, out] = test::run_process(args, at("out" + std::to_string(step++)), 60s);
    CHECK_MESSAGE(rc == want_rc, out);
    everything += out;
  };
  run({"start", "steps", "s1", R"({"steps":2})", "--server", listen, "--token-file",
       at("client.token")},
      0);
  run({"result", "s1", "--wait-ms", "20000", "--server", listen, "--token-file", at("read.token")},
      0);
  // Refused for the token: exit 1, as any refusal (2 is for no answer).
  run({"start", "steps", "s2", "null", "--server", listen, "--token-file", at("read.token")}, 1);
  run({"start", "steps", "s3", "null", "--server", listen, "--token-file", at("wrong.token")}, 1);
  run({"inspect", "--node", "127.0.0.1:" + std::to_string(server.inspect_port())}, 0);
  auto bearer = [&](const std::string& scope) {
    return std::vector<std::string>{"Authorization: Bearer " +
                                    tokens.at(scope == "read" ? 2 : 1).second};
  };
  for (auto path : {"/metrics", "/v1/overview", "/v1/sessions", "/v1/endpoints", "/v1/problems",
                    "/v1/actors", "/v1/invoker"}) {
    everything +=
        test::http_request("GET", server.admin_port(), path, "", 10000, bearer("read")).second;
    everything += test::http_request("GET", server.admin_port(), path, "", 10000).second;
  }
  everything +=
      test::http_request("GET", server.http_port(), "/v1/workflows/s1", "", 10000, bearer("read"))
          .second;
  everything += test::http_request("POST", server.http_port(), "/v1/workflows/steps/s4", "null",
                                   10000, bearer("read"))
                    .second;
  everything += test::http_request("GET", server.http_port(), "/v1/workflows/s1", "", 10000,
                                   {"Authorization: Bearer wr-0000000000000000000000000000000"})
                    .second;
  server.stop();
  everything += server.log() + handler.log();
  // The session did what it should: the run completed, the refusals were logged.
  CHECK(everything.find("\"status\":\"completed\"") != std::string::npos);
  CHECK(everything.find("refused a connection") != std::string::npos);
  CHECK(everything.find("refused an HTTP request") != std::string::npos);
  for (auto& [scope, secret] : tokens)
    CHECK_MESSAGE(everything.find(secret) == std::string::npos, scope << " token leaked");
  CHECK(everything.find("wr-0000000000000000000000000000000") == std::string::npos);
  CHECK(everything.find("s3cret") == std::string::npos);
}
