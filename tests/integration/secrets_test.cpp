// Secrets (tokens, an endpoint's signing secret) never appear in logs, metrics, views, error
// messages or command output: a scripted session that uses and refuses each, then a grep.
#include <doctest/doctest.h>

#include <fstream>

#include "handler_process.hpp"
#include "server_process.hpp"

using namespace fusee;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

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

TEST_CASE("a secret file other users of the machine may read is warned about at start, naming "
          "the file and the fix, and one only its owner reads is not") {
  test::temp_dir dir;
  auto at = [&](const std::string& name) { return (dir.path() / name).string(); };
  std::ofstream{at("open.token")} << "op-00112233445566778899aabbccddeeff\n";
  std::ofstream{at("closed.token")} << "cl-00112233445566778899aabbccddeeff\n";
  std::ofstream{at("endpoint.secret")} << "ep-00112233445566778899aabbccddeeff\n";
  fs::permissions(at("open.token"), fs::perms(0644));
  fs::permissions(at("closed.token"), fs::perms(0600));
  fs::permissions(at("endpoint.secret"), fs::perms(0602));  // written by anyone
  std::string toml = "[server]\nshards = 2\n";
  for (auto name : {"open", "closed"})
    toml += std::string{"[[token]]\nname = \""} + name + "\"\nscope = \"client\"\nfile = \"" +
            at(std::string{name} + ".token") + "\"\n";
  toml += "[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"" + at("endpoint.secret") +
          "\"\n";
  test::server_process server(dir.path() / "data", toml);
  REQUIRE(server.start().empty());
  // A client or worker says it of its --token-file (and its TLS key file) on stderr, and goes on
  // (here to a port nobody listens on).
  auto describe = [&](const std::string& token) {
    return test::run_process({test::fusee_binary(), "describe", "nobody", "--server", "127.0.0.1:1",
                              "--token-file", at(token)},
                             at(token + ".out"), 30s)
        .second;
  };
  auto out = describe("open.token");
  CHECK_MESSAGE(out.find("fusee describe: warning: token file " + at("open.token") +
                         " may be read by every user of this machine (mode 0644)") !=
                    std::string::npos,
                out);
  CHECK_MESSAGE(out.find("cannot connect to 127.0.0.1:1") != std::string::npos, out);
  out = describe("closed.token");
  CHECK_MESSAGE(out.find("warning") == std::string::npos, out);
  CHECK_MESSAGE(out.find("cannot connect to 127.0.0.1:1") != std::string::npos, out);
  // (The warning comes before the files are used: any file stands in for a certificate here.)
  out = test::run_process({test::fusee_binary(), "describe", "nobody", "--server", "127.0.0.1:1",
                           "--cert-file", at("closed.token"), "--key-file", at("open.token")},
                          at("key.out"), 30s)
            .second;
  CHECK_MESSAGE(out.find("fusee describe: warning: TLS key file " + at("open.token") +
                         " may be read by every user of this machine (mode 0644)") !=
                    std::string::npos,
                out);
  server.stop();
  auto log = server.log();
  CHECK_MESSAGE(log.find("token file " + at("open.token") +
                         " may be read by every user of this machine (mode 0644): `chmod 600 " +
                         at("open.token") + "`") != std::string::npos,
                log);
  CHECK(log.find("endpoint secret file " + at("endpoint.secret") +
                 " may be written by every user of this machine (mode 0602)") != std::string::npos);
  CHECK(log.find(at("closed.token")) == std::string::npos);

  // fusee handler says the same of its --secret-file, on stderr before it is ready.
  fs::permissions(at("endpoint.secret"), fs::perms(0604));
  auto ready = dir.path() / "handler.ready";
  int pid =
      test::spawn_process({test::fusee_binary(), "handler", "--listen", "127.0.0.1:0",
                           "--secret-file", at("endpoint.secret"), "--ready-file", ready.string()},
                          dir.path() / "handler.log");
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!fs::exists(ready) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);  // (polling for the file: it has no other signal)
  bool was_ready = fs::exists(ready);  // (it removes the file when it stops)
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  std::ifstream in(dir.path() / "handler.log");
  std::string hlog{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  REQUIRE_MESSAGE(was_ready, hlog);
  CHECK_MESSAGE(hlog.find("fusee handler: warning: secret file " + at("endpoint.secret") +
                          " may be read by every user of this machine (mode 0604)") !=
                    std::string::npos,
                hlog);
}
