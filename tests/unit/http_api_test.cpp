// The HTTP API without a node: routes to CALLs, CALL_RESULTs to statuses, and the suspended
// requests of the async HTTP server (answered later from another thread, or 503 at shutdown).
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include <curl/curl.h>

#include "app/browser_origin.hpp"
#include "app/host_allow_list.hpp"
#include "app/host_check.hpp"
#include "app/http_api.hpp"
#include "app/http_server.hpp"
#include "app/url_decoding.hpp"
#include "curl_request.hpp"
#include "integration/raw_socket.hpp"
#include "protocol/json_text.hpp"

using namespace fusee;
using namespace fusee::app;

namespace {

http_exchange ex(std::string method, std::string path, std::string body = "",
                 std::map<std::string, std::string> query = {}) {
  http_exchange e;
  e.method = std::move(method);
  e.raw_path = path;  // (the tests' paths hold no escapes)
  e.path = std::move(path);
  e.body = std::move(body);
  e.query = std::move(query);
  return e;
}

}  // namespace

TEST_CASE("each HTTP API route becomes the CALL of its method with the arguments as JSON") {
  auto start = route_api_request(ex("POST", "/v1/workflows/checkout/order-1", R"({"amount":4})"));
  REQUIRE(start.call);
  CHECK(start.call->method == "start");
  CHECK(start.call->workflow == "order-1");
  CHECK(start.call->type == "checkout");
  CHECK(start.call->args == R"({"id":"order-1","type":"checkout","input":{"amount":4}})");

  auto empty = route_api_request(ex("POST", "/v1/workflows/steps/x"));
  REQUIRE(empty.call);
  CHECK(empty.call->args == R"({"id":"x","type":"steps","input":null})");

  auto result = route_api_request(ex("GET", "/v1/workflows/order-1", "", {{"wait_ms", "2500"}}));
  REQUIRE(result.call);
  CHECK(result.call->method == "result");
  CHECK(result.call->wait_ms == 2500);
  CHECK(result.call->args == R"({"id":"order-1","wait_ms":2500})");

  auto describe = route_api_request(ex("GET", "/v1/workflows/order-1/describe"));
  REQUIRE(describe.call);
  CHECK(describe.call->method == "describe");

  auto signal =
      route_api_request(ex("POST", "/v1/workflows/order-1/signals/review", R"( {"ok":1} )"));
  REQUIRE(signal.call);
  CHECK(signal.call->args == R"({"id":"order-1","name":"review","payload":{"ok":1} })");

  auto keyed = ex("POST", "/v1/workflows/order-1/signals/review", "{}");
  keyed.headers["idempotency-key"] = "review-7";
  auto with_key = route_api_request(keyed);
  REQUIRE(with_key.call);
  CHECK(with_key.call->args == R"({"id":"order-1","name":"review","payload":{},"key":"review-7"})");
  keyed.repeated_headers.insert("idempotency-key");
  auto twice = route_api_request(keyed);
  REQUIRE(twice.refusal);
  CHECK(twice.refusal->status == 400);
  CHECK(twice.refusal->body.find("given twice") != std::string::npos);
  keyed.repeated_headers.clear();
  for (std::string bad : {std::string{}, std::string(257, 'k'), std::string{"a\x01"}}) {
    keyed.headers["idempotency-key"] = bad;
    auto r = route_api_request(keyed);
    REQUIRE(r.refusal);
    CHECK(r.refusal->status == 400);
    CHECK(r.refusal->body.find("Idempotency-Key") != std::string::npos);
  }

  auto cancel = route_api_request(ex("POST", "/v1/workflows/order-1/cancel"));
  REQUIRE(cancel.call);
  CHECK(cancel.call->method == "cancel");
  CHECK(cancel.call->args == R"({"id":"order-1"})");
  auto reasoned =
      route_api_request(ex("POST", "/v1/workflows/order-1/cancel", R"({"reason":"dup"})"));
  REQUIRE(reasoned.call);
  CHECK(reasoned.call->args == R"({"id":"order-1","reason":"dup"})");
  CHECK(route_api_request(ex("POST", "/v1/workflows/order-1/cancel", "{}")).call);
}

TEST_CASE("a cancel's body other than {\"reason\"} is refused: it reads as a start of a workflow "
          "whose id is `cancel`, which would cancel the run named like its type") {
  for (std::string body : {R"({"amount":4})", "3", "not json", R"({"reason":7})"}) {
    CAPTURE(body);
    auto r = route_api_request(ex("POST", "/v1/workflows/checkout/cancel", body));
    REQUIRE(r.refusal);
    CHECK(r.refusal->status == 400);
    CHECK(r.refusal->body.find("fusee start") != std::string::npos);
  }
}

TEST_CASE("bad HTTP API requests are refused with a fitting status and code before any call") {
  auto status = [](http_exchange e) {
    auto r = route_api_request(e);
    REQUIRE(r.refusal);
    CHECK(r.refusal->body.find("\"error\"") != std::string::npos);
    const char* code = r.refusal->status == 400   ? "\"code\":\"bad_request\""
                       : r.refusal->status == 404 ? "\"code\":\"no_route\""
                                                  : "\"code\":\"bad_method\"";
    CHECK_MESSAGE(r.refusal->body.find(code) != std::string::npos, r.refusal->body);
    return r.refusal->status;
  };
  CHECK(status(ex("POST", "/v1/workflows/steps/x", "{not json")) == 400);
  CHECK(status(ex("POST", "/v1/workflows/x/signals/go", "[1,")) == 400);
  CHECK(status(ex("GET", "/v1/workflows/x", "", {{"wait_ms", "-1"}})) == 400);
  CHECK(status(ex("GET", "/v1/workflows/x", "", {{"wait_ms", "600001"}})) == 400);
  CHECK(status(ex("GET", "/v1/workflows/x", "", {{"wait_ms", "12ms"}})) == 400);
  CHECK(status(ex("POST", "/v1/workflows/steps/" + std::string(257, 'a'))) == 400);
  CHECK(status(ex("POST", "/v1/workflows/steps/a\tb")) == 400);
  CHECK(status(ex("GET", "/v2/workflows/x")) == 404);
  CHECK(status(ex("GET", "/v1/workflows/x/frobnicate")) == 404);
  CHECK(status(ex("POST", "/v1/workflows/a/b/c/d")) == 404);
  CHECK(status(ex("DELETE", "/v1/workflows/x")) == 405);
  CHECK(route_api_request(ex("DELETE", "/v1/workflows/x")).refusal->allow == "GET, POST");
  // a trailing or doubled '/' names an empty signal name, type or id, never another route (the
  // signal route with a '/' after it once started a workflow of the id's type)
  CHECK(status(ex("POST", "/v1/workflows/steps/signals/", "{}")) == 400);
  CHECK(status(ex("POST", "/v1/workflows/steps/x/")) == 404);
  CHECK(status(ex("POST", "/v1/workflows//x")) == 400);
  CHECK(status(ex("GET", "/v1/workflows/")) == 400);
  // a misspelt argument is refused, not ignored (`wait=5000` would not wait)
  CHECK(status(ex("GET", "/v1/workflows/x", "", {{"wait", "5000"}})) == 400);
  CHECK(status(ex("GET", "/v1/workflows/x/describe", "", {{"wait_ms", "5"}})) == 400);
  CHECK(status(ex("POST", "/v1/workflows/x/cancel", "", {{"force", "1"}})) == 400);
  CHECK(status(ex("POST", "/v1/workflows/x/signals/go", "", {{"a", ""}})) == 400);
  CHECK(status(ex("POST", "/v1/workflows/steps/x", "", {{"id", "y"}})) == 400);
  auto twice = ex("GET", "/v1/workflows/x", "", {{"wait_ms", "5"}});
  twice.repeated_query = "wait_ms";  // (?wait_ms=1&wait_ms=5: the server keeps the last)
  auto repeated = route_api_request(twice);
  REQUIRE(repeated.refusal);
  CHECK(repeated.refusal->status == 400);
  CHECK(repeated.refusal->body.find("query argument 'wait_ms' is given twice") !=
        std::string::npos);
  auto named = route_api_request(ex("GET", "/v1/workflows/x", "", {{"wait", "5000"}}));
  REQUIRE(named.refusal);
  CHECK(named.refusal->body.find("unknown query argument 'wait' for GET /v1/workflows/x (it "
                                 "takes wait_ms)") != std::string::npos);
}

TEST_CASE(
    "CALL_RESULTs map to HTTP statuses for new runs and refusals by code and missing holders") {
  CHECK(api_reply("start", 0, R"({"id":"a","existing":false})").status == 201);
  CHECK(api_reply("start", 0, R"({"id":"a","existing":true})").status == 200);
  CHECK(api_reply("result", 0, R"({"id":"a"})").status == 200);
  CHECK(api_reply("result", 1, R"({"error":"no","code":"not_found"})").status == 404);
  CHECK(api_reply("start", 1, R"({"error":"no","code":"conflict"})").status == 409);
  CHECK(api_reply("signal", 1, R"({"error":"no","code":"finished"})").status == 409);
  CHECK(api_reply("start", 1, R"({"error":"no","code":"unknown_type"})").status == 400);
  CHECK(api_reply("start", 1, "not json").status == 400);
  CHECK(api_reply("start", 2, R"({"error":"parked"})").status == 503);
  CHECK(api_reply("start", 3, R"({"error":"lost"})").status == 503);
  CHECK(api_reply("start", 4, R"({"error":"bad"})").status == 400);
  // the server's own refusals get the code every HTTP error carries; the worker's keep theirs
  CHECK(api_reply("start", 2, R"({"error":"parked"})").body ==
        "{\"error\":\"parked\",\"code\":\"no_holder\"}\n");
  CHECK(api_reply("start", 3, R"({"error":"lost"})").body ==
        "{\"error\":\"lost\",\"code\":\"holder_lost\"}\n");
  CHECK(api_reply("start", 4, R"({"error":"bad"})").body ==
        "{\"error\":\"bad\",\"code\":\"bad_request\"}\n");
  CHECK(api_reply("start", 1, R"({"error":"no","code":"conflict"})").body ==
        "{\"error\":\"no\",\"code\":\"conflict\"}\n");
  CHECK(api_reply("start", 9, "").body.find("\"code\":\"bad_status\"") != std::string::npos);
  CHECK(api_reply("start", 1, R"({"error":"no"})").body ==
        "{\"error\":\"no\",\"code\":\"failed\"}\n");
  CHECK(api_reply("start", 1, R"({"error":"no","code":5})").body ==
        "{\"error\":\"no\",\"code\":\"failed\"}\n");
  CHECK(api_reply("start", 1, "no such thing").body ==
        "{\"error\":\"the worker refused: no such thing\",\"code\":\"failed\"}\n");
  auto r = api_reply("result", 0, R"({"id":"a"})");
  CHECK(r.body.back() == '\n');
  // a worker's refusal that is not UTF-8 still makes valid JSON: its bad bytes become U+FFFD
  CHECK(api_reply("start", 1, "bad \xff\xc3 caf\xc3\xa9").body ==
        "{\"error\":\"the worker refused: bad \\ufffd\\ufffd caf\xc3\xa9\",\"code\":\"failed\"}\n");
}

TEST_CASE("JSON strings keep valid UTF-8 as it is and write every byte that is not as U+FFFD") {
  using proto::json_quote;
  CHECK(json_quote("a\"b\\c\n") == R"("a\"b\\c\u000a")");
  CHECK(json_quote("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") ==
        "\"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  CHECK(json_quote("\x80") == R"("\ufffd")");              // a stray continuation byte
  CHECK(json_quote("\xc3") == R"("\ufffd")");              // cut short at the end
  CHECK(json_quote("\xe2\x82x") == R"("\ufffd\ufffdx")");  // cut short before ASCII
  CHECK(json_quote("\xc0\xaf") == R"("\ufffd\ufffd")");    // overlong '/'
  CHECK(json_quote("\xe0\x80\xaf") == R"("\ufffd\ufffd\ufffd")");
  CHECK(json_quote("\xed\xa0\x80") == R"("\ufffd\ufffd\ufffd")");            // a surrogate
  CHECK(json_quote("\xf4\x90\x80\x80") == R"("\ufffd\ufffd\ufffd\ufffd")");  // past U+10FFFF
  CHECK(json_quote("\xf4\x8f\xbf\xbf") == "\"\xf4\x8f\xbf\xbf\"");           // U+10FFFF itself
  CHECK(json_quote("a\xf0\x9f\x98") == R"("a\ufffd\ufffd\ufffd")");  // 4 bytes cut at the end
  CHECK(json_quote("\xf5\x80\x80\x80") == R"("\ufffd\ufffd\ufffd\ufffd")");  // no such lead
}

/// An async HTTP server whose handler keeps the responder of the one request it gets.
struct holding_server {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<http_responder> waiting;
  std::unique_ptr<http_server> srv;
  explicit holding_server(http_server::options o = {}) {
    std::string err;
    srv = http_server::start_async(
        "127.0.0.1", 0,
        [this](const http_exchange&, http_responder r) {
          std::lock_guard lock(mu);
          waiting.emplace(std::move(r));
          cv.notify_all();
        },
        &err, std::move(o));
    REQUIRE_MESSAGE(srv, err);
  }
  /// Waits until the handler holds a request.
  void held() {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return waiting.has_value(); }));
  }
  /// Sends a GET and waits until the handler holds it; the future is its {status, body}.
  std::future<std::pair<long, std::string>> request_held() {
    auto answer = std::async(
        std::launch::async, [port = srv->port()] { return test::http_request("GET", port, "/x"); });
    held();
    return answer;
  }
};

TEST_CASE("an async HTTP request waits suspended until it is answered from another thread") {
  holding_server h;
  auto answer = h.request_held();
  std::thread later([&] { (*h.waiting)(http_reply{200, "application/json", "{\"late\":true}"}); });
  auto [status, body] = answer.get();
  later.join();
  CHECK(status == 200);
  CHECK(body == "{\"late\":true}");
  (*h.waiting)(http_reply{500, "application/json", "{}"});  // a second answer is ignored
}

TEST_CASE("a request libmicrohttpd refuses before the handler sees it (headers over its memory) "
          "is answered 431 and the next is served (its state freed: the sanitizer build checks)") {
  std::atomic<int> handled{0};
  std::string err;
  auto srv = http_server::start(
      "127.0.0.1", 0,
      [&](const http_exchange&) {
        ++handled;
        return http_reply{200, "application/json", "{}"};
      },
      &err);
  REQUIRE_MESSAGE(srv, err);
  auto big = test::http_request("GET", srv->port(), "/v1/x", "", 5000,
                                {"X-Big: " + std::string(64 * 1024, 'a')});
  CHECK(big.first == 431);
  CHECK(handled == 0);
  CHECK(test::http_request("GET", srv->port(), "/v1/x").first == 200);
  CHECK(handled == 1);
}

TEST_CASE("an id or a name holding '/' is named with %2F in the API's paths: each segment is "
          "decoded on its own") {
  auto routed = [](std::string method, std::string raw, std::string body = "") {
    http_exchange e;
    e.method = std::move(method);
    e.raw_path = raw;
    e.path = percent_decoded(raw);
    e.body = std::move(body);
    return route_api_request(e);
  };
  auto start = routed("POST", "/v1/workflows/steps/orders%2F7", R"({"steps":1})");
  REQUIRE(start.call);
  CHECK(start.call->workflow == "orders/7");
  CHECK(start.call->args == R"({"id":"orders/7","type":"steps","input":{"steps":1}})");
  auto describe = routed("GET", "/v1/workflows/orders%2f7/describe");
  REQUIRE(describe.call);
  CHECK(describe.call->args == R"({"id":"orders/7"})");
  auto signal = routed("POST", "/v1/workflows/a%2Fb/signals/review%2F1%20x");
  REQUIRE(signal.call);
  CHECK(signal.call->args == R"({"id":"a/b","name":"review/1 x","payload":null})");
  auto result = routed("GET", "/v1/workflows/%2F");
  REQUIRE(result.call);
  CHECK(result.call->args == R"({"id":"/","wait_ms":0})");
  // An unescaped '/' still separates: this is the describe of run "a", not a run "a/describe".
  auto plain = routed("GET", "/v1/workflows/a/describe");
  REQUIRE(plain.call);
  CHECK(plain.call->args == R"({"id":"a"})");
  // %00 is refused inside a segment too, and an escaped route word is an id, not the word.
  auto nul = routed("GET", "/v1/workflows/a%00b");
  REQUIRE(nul.refusal);
  CHECK(nul.refusal->status == 400);
  auto cancel = routed("POST", "/v1/workflows/steps/%63ancel");
  REQUIRE(cancel.call);
  CHECK(cancel.call->method == "cancel");  // decoded before routing: "cancel" names the route
  CHECK(cancel.call->workflow == "steps");
}

TEST_CASE("%00 in a path or query value reaches the handler as a control character (0x7F), not "
          "as the end of the text, and other escapes are decoded as ever") {
  std::mutex mu;
  http_exchange seen;
  std::string err;
  auto srv = http_server::start(
      "127.0.0.1", 0,
      [&](const http_exchange& ex) {
        std::lock_guard lock(mu);
        seen = ex;
        return http_reply{200, "application/json", "{}"};
      },
      &err);
  REQUIRE_MESSAGE(srv, err);
  CHECK(test::http_request("GET", srv->port(), "/v1/a%00b%2Fc?wait_ms=5%00junk&x=%41%zz").first ==
        200);
  std::lock_guard lock(mu);
  CHECK(seen.path == std::string{"/v1/a\x7f"} + "b/c");
  CHECK(seen.raw_path == "/v1/a%00b%2Fc");  // as sent, without its query
  CHECK(seen.query["wait_ms"] == std::string{"5\x7f"} + "junk");
  CHECK(seen.query["x"] == "A%zz");  // an escape that is none stays as it is
  // The routes refuse such an id as they refuse any control character.
  auto routed = route_api_request(ex("GET", std::string{"/v1/workflows/a\x7f"} + "b"));
  REQUIRE(routed.refusal);
  CHECK(routed.refusal->status == 400);
  CHECK(routed.refusal->body.find("control characters") != std::string::npos);
  auto waited = route_api_request(
      ex("GET", "/v1/workflows/a", "", {{"wait_ms", std::string{"5\x7f"} + "junk"}}));
  REQUIRE(waited.refusal);
  CHECK(waited.refusal->status == 400);
}

TEST_CASE("an HTTP server whose port is taken says so (libmicrohttpd's own message does not "
          "change the reason)") {
  auto ok = [](const http_exchange&) { return http_reply{200, "application/json", "{}"}; };
  std::string err;
  auto first = http_server::start("127.0.0.1", 0, ok, &err);
  REQUIRE_MESSAGE(first, err);
  auto second = http_server::start("127.0.0.1", first->port(), ok, &err);
  CHECK_FALSE(second);
  CHECK_MESSAGE(err.find("Address already in use") != std::string::npos, err);
  CHECK_MESSAGE(err.find(":" + std::to_string(first->port()) + ":") != std::string::npos, err);
}

TEST_CASE("a client that closes its connection while its request waits frees the connection at "
          "once, and the answer that comes later goes nowhere") {
  http_server::options o;
  o.max_connections = 1;
  holding_server h(std::move(o));
  std::optional<test::raw_socket> client{std::in_place, h.srv->port(),
                                         "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"};
  h.held();
  auto gave_up = std::move(*h.waiting);
  h.waiting.reset();
  client.reset();  // the client gives up
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (h.srv->connections_open() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK(h.srv->connections_open() == 0);
  CHECK(h.srv->clients_gone() == 1);
  // The one connection the server allows serves the next client.
  auto answer = h.request_held();
  (*h.waiting)(http_reply{200, "application/json", "{}"});
  CHECK(answer.get().first == 200);
  gave_up(http_reply{200, "application/json", "{\"late\":true}"});  // nobody to send it to
  CHECK(h.srv->clients_gone() == 1);
}

TEST_CASE("stopping the async HTTP server answers the requests still waiting with 503") {
  holding_server h;
  auto answer = h.request_held();
  h.srv.reset();
  auto [status, body] = answer.get();
  CHECK(status == 503);
  CHECK(body == "{\"error\":\"the server is stopping\",\"code\":\"stopping\"}\n");
  (*h.waiting)(http_reply{200, "application/json", "{}"});  // after the stop: nothing happens
}

TEST_CASE("the API answers web pages of its own address only, and requests without an Origin") {
  auto ask = [](std::map<std::string, std::string> headers) {
    app::http_exchange ex;
    ex.method = "POST";
    ex.path = "/v1/workflows/steps/w1";
    ex.headers = std::move(headers);
    return app::check_origin(ex, app::host_allow_list{{}});
  };
  CHECK_FALSE(ask({{"host", "127.0.0.1:7402"}}));  // curl, the clients
  CHECK_FALSE(ask({{"host", "127.0.0.1:7402"}, {"origin", "http://127.0.0.1:7402"}}));
  CHECK_FALSE(ask({{"host", "localhost:7402"}, {"origin", "http://LOCALHOST:7402"}}));
  CHECK_FALSE(ask({{"host", "[::1]:7402"}, {"origin", "https://[::1]:7402"}}));
  auto other = ask({{"host", "127.0.0.1:7402"}, {"origin", "https://evil.example"}});
  REQUIRE(other);
  CHECK(other->status == 403);
  CHECK(other->body.find("\"code\":\"cross_origin\"") != std::string::npos);
  CHECK(other->body.find("https://evil.example") != std::string::npos);
  // a page whose name was rebound to this address: same origin to the browser, not an address
  CHECK(ask({{"host", "evil.example:7402"}, {"origin", "http://evil.example:7402"}}));
  CHECK(ask({{"host", "127.0.0.1:7402"}, {"origin", "null"}}));
  CHECK(ask({{"host", "127.0.0.1:7402"}, {"origin", "http://127.0.0.1:9999"}}));
  CHECK(ask({{"origin", "http://127.0.0.1:7402"}}));  // no Host to compare with
}

TEST_CASE("a page of its own origin under a name the node allows is answered, under another not") {
  app::http_exchange ex;
  ex.headers = {{"host", "fusee.internal:7402"}, {"origin", "http://fusee.internal:7402"}};
  CHECK_FALSE(app::check_origin(ex, app::host_allow_list{{"fusee.internal"}}));
  CHECK(app::check_origin(ex, app::host_allow_list{{"other.internal"}}));
  // "*" answers any Host, but trusts no page for it: a rebound page's own origin is refused
  ex.headers = {{"host", "evil.example:7402"}, {"origin", "http://evil.example:7402"}};
  CHECK(app::check_origin(ex, app::host_allow_list{{"*"}}));
  CHECK(app::check_origin(ex, app::host_allow_list::for_node(server::node_settings{}, true)));
}

TEST_CASE("hosts allowed: addresses, localhost and its subdomains, the names given, any with *") {
  app::host_allow_list none{{}};
  for (auto h : {"127.0.0.1", "127.0.0.1:7402", "10.1.2.3:80", "[::1]:7402", "[fe80::1]",
                 "localhost", "LocalHost:1", "app.localhost:7401"})
    CHECK_MESSAGE(none.allows(h), h);
  for (auto h : {"evil.example", "evil.example:7402", "localhost.evil.example", "127.0.0.1.nip.io",
                 "[evil.example]:1", "", ":7402", "xlocalhost"})
    CHECK_MESSAGE(!none.allows(h), h);
  app::host_allow_list named{{"Fusee.Internal", ""}};
  CHECK(named.allows("fusee.internal:7402"));
  CHECK(named.allows("FUSEE.INTERNAL"));
  CHECK(named.allows("fusee.internal.:7402"));  // the same DNS name
  CHECK(none.allows("localhost."));
  CHECK_FALSE(named.allows("*"));
  CHECK_FALSE(app::host_allow_list{{"*"}}.names("*:7402"));  // "*" allows, but names nothing
  CHECK_FALSE(named.allows("sub.fusee.internal"));
  CHECK_FALSE(named.allows(""));
  CHECK(app::host_allow_list{{"*"}}.allows("evil.example"));
  CHECK(app::host_allow_list{{"*"}}.allows("evil.example:1"));
}

TEST_CASE("a node allows the names of its listen addresses, its advertised one and its cluster "
          "entry's, and any host with TLS") {
  server::node_settings s;
  s.http_listen = "api.internal:7402";
  s.admin_listen = "[::1]:7401";
  s.advertise = "worker-gw.internal:7400";
  s.allowed_hosts = {"proxy.internal"};
  s.clustered = true;
  s.cluster_node = "a";
  s.cluster.nodes = {{"a", "10.0.0.1:7410", "10.0.0.1:7400", "node-a.internal:7402", {}},
                     {"b", "10.0.0.2:7410", "10.0.0.2:7400", "node-b.internal:7402", {}}};
  auto hosts = app::host_allow_list::for_node(s, false);
  for (auto h : {"api.internal:7402", "worker-gw.internal", "proxy.internal", "node-a.internal"})
    CHECK_MESSAGE(hosts.allows(h), h);
  CHECK_FALSE(hosts.allows("node-b.internal:7402"));  // another node's name
  CHECK_FALSE(hosts.allows("evil.example"));
  auto with_tls = app::host_allow_list::for_node(s, true);
  CHECK(with_tls.allows("evil.example"));
  CHECK_FALSE(with_tls.names("evil.example"));  // the Origin check still wants a named host
  CHECK(with_tls.names("api.internal:7402"));
}

TEST_CASE("without tokens a request naming a host not allowed is refused with host_not_allowed, "
          "one without Host or naming an address is answered") {
  app::http_exchange ex;
  ex.method = "GET";
  ex.path = "/v1/overview";
  ex.headers = {{"host", "evil.example:7401"}};
  app::host_allow_list hosts{{}};
  auto refused = app::check_host(ex, hosts, nullptr);
  REQUIRE(refused);
  CHECK(refused->status == 403);
  CHECK(refused->body.find("\"code\":\"host_not_allowed\"") != std::string::npos);
  CHECK(refused->body.find("evil.example") != std::string::npos);
  auto open = server::token_store::load({});  // a node with no [[token]]
  REQUIRE(open);
  CHECK(app::check_host(ex, hosts, open->get()));
  ex.headers = {};  // HTTP/1.0 without Host: not a browser
  CHECK_FALSE(app::check_host(ex, hosts, nullptr));
  ex.headers = {{"host", "127.0.0.1:7401"}};
  CHECK_FALSE(app::check_host(ex, hosts, nullptr));
}
