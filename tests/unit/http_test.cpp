// The invoker's HTTP client (curl multi thread) against our microhttpd server: signed POSTs,
// refused signatures, refused connections and time-outs.
#include <doctest/doctest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <curl/curl.h>

#include "actors/http_client.hpp"
#include "app/http_server.hpp"
#include "integration/raw_socket.hpp"
#include "protocol/signature.hpp"

using namespace fusee;

namespace {

struct results {
  std::mutex mtx;
  std::condition_variable cv;
  std::map<uint64_t, server::http_result> by_id;
  void add(server::http_result r) {
    std::lock_guard<std::mutex> lk{mtx};
    by_id[r.id] = std::move(r);
    cv.notify_all();
  }
  server::http_result await(uint64_t id) {
    std::unique_lock<std::mutex> lk{mtx};
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(20), [&] { return by_id.count(id) > 0; }));
    return by_id[id];
  }
};

uint64_t now_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

/// An endpoint that checks the signature like a handler must (PROTOCOL.md §8).
app::http_reply handle(const app::http_exchange& ex) {
  if (ex.path == "/slow")
    std::this_thread::sleep_for(std::chrono::seconds(2));  // a hanging endpoint, simulated
  std::vector<std::string> secrets{"s3cret"};
  auto sig = ex.headers.find("fusee-signature");
  if (sig == ex.headers.end() || proto::verify(sig->second, ex.body, secrets, now_ms()))
    return {401, "application/json", R"({"error":"bad signature"})"};
  if (auto ct = ex.headers.find("content-type");
      ct == ex.headers.end() || ct->second != "application/json")
    return {400, "application/json", R"({"error":"content-type"})"};
  return {200, "application/json", R"({"ok":true,"bytes":)" + std::to_string(ex.body.size()) + "}"};
}

server::http_request signed_post(results& got, uint64_t id, uint16_t port,
                                 const std::string& secret, const std::string& path = "/invoke") {
  std::string body = R"({"version":1,"invocation":"00000000000000ab","shards":[1]})";
  server::http_request r;
  r.id = id;
  r.url = "http://127.0.0.1:" + std::to_string(port) + path;
  r.headers = {"content-type: application/json",
               "fusee-signature: " + proto::sign(secret, now_ms(), body)};
  r.body = body;
  r.timeout_ms = 5000;
  r.done = [&got](server::http_result res) { got.add(std::move(res)); };
  return r;
}

/// An endpoint that holds every POST until release() (or 10 s), counting those that arrived.
struct holding_endpoint {
  std::mutex mtx;
  std::condition_variable cv;
  int count = 0;
  bool released = false;
  std::unique_ptr<app::http_server> srv;
  holding_endpoint() {
    std::string err;
    srv = app::http_server::start(
        "127.0.0.1", 0,
        [this](const app::http_exchange&) {
          std::unique_lock<std::mutex> lk{mtx};
          ++count;
          cv.notify_all();
          cv.wait_for(lk, std::chrono::seconds(10), [&] { return released; });
          return app::http_reply{200, "application/json", "{}"};
        },
        &err);
    REQUIRE_MESSAGE(srv, err);
  }
  ~holding_endpoint() {
    release();
    srv.reset();
  }
  uint16_t port() const { return srv->port(); }
  /// Whether `holds(POSTs arrived)` came true within `within`.
  template <class Pred>
  bool await(Pred holds, std::chrono::milliseconds within = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lk{mtx};
    return cv.wait_for(lk, within, [&] { return holds(count); });
  }
  int arrived() {
    std::lock_guard<std::mutex> lk{mtx};
    return count;
  }
  void release() {
    std::lock_guard<std::mutex> lk{mtx};
    released = true;
    cv.notify_all();
  }
};

/// A client of one connection whose first POST (id 1) the endpoint holds; second() is the POST
/// (id 2) that has to wait for the connection.
struct one_connection_held {
  bool curl_ready = (curl_global_init(CURL_GLOBAL_DEFAULT), true);
  holding_endpoint h;
  results got;
  server::http_client client{1};
  one_connection_held() {
    client.submit(signed_post(got, 1, h.port(), "s3cret"));
    REQUIRE(h.await([](int arrived) { return arrived == 1; }));
  }
  server::http_request second() { return signed_post(got, 2, h.port(), "s3cret"); }
};

}  // namespace

TEST_CASE(
    "the HTTP client posts signed bodies and reports each outcome through the request's callback") {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  std::string err;
  auto srv = app::http_server::start("127.0.0.1", 0, handle, &err);
  REQUIRE_MESSAGE(srv, err);
  results got;
  server::http_client client;

  client.submit(signed_post(got, 1, srv->port(), "s3cret"));
  auto ok = got.await(1);
  CHECK(ok.status == 200);
  CHECK(ok.body.find("\"ok\":true") != std::string::npos);
  CHECK(ok.error.empty());

  client.submit(signed_post(got, 2, srv->port(), "wrong"));
  CHECK(got.await(2).status == 401);

  auto slow = signed_post(got, 3, srv->port(), "s3cret", "/slow");
  slow.timeout_ms = 200;
  client.submit(slow);
  auto late = got.await(3);
  CHECK(late.status == 0);
  CHECK(late.timed_out);

  auto port = srv->port();
  srv.reset();  // nobody listens any more
  client.submit(signed_post(got, 4, port, "s3cret"));
  auto refused = got.await(4);
  CHECK(refused.status == 0);
  CHECK_FALSE(refused.timed_out);
  CHECK(refused.error.find("onnect") != std::string::npos);
  CHECK(refused.sent);  // tried: the endpoint's failure
  CHECK_FALSE(refused.stopping);
  CHECK(client.in_flight() == 0);

  client.stop();  // a POST after the client stopped is still answered, not lost
  client.submit(signed_post(got, 5, port, "s3cret"));
  auto stopped = got.await(5);
  CHECK(stopped.status == 0);
  CHECK(stopped.error == "not sent: the server is stopping");
  CHECK_FALSE(stopped.sent);
  CHECK(stopped.stopping);  // no failure of the endpoint's
}

TEST_CASE("curl's connect time-out is a failure to reach the endpoint, not an answer's time-out") {
  using server::http_client;
  CHECK(http_client::answer_timed_out(true, false, 90'000.5, 90'000));
  CHECK_FALSE(http_client::answer_timed_out(true, false, 5'001, 90'000));  // connect time-out
  CHECK_FALSE(http_client::answer_timed_out(false, true, 95'000, 90'000));
  CHECK_FALSE(http_client::answer_timed_out(true, false, 5'001, 0));  // no deadline: a connect's
}

TEST_CASE("a request sent and not answered in time is an answer's time-out, even when curl's own "
          "clock ended it just before the node's says the time was up") {
  using server::http_client;
  CHECK(http_client::answer_timed_out(true, true, 2'499.4, 2'500));
  CHECK(http_client::answer_timed_out(true, false, 2'499.4, 2'500));  // within curl's millisecond
  CHECK_FALSE(http_client::answer_timed_out(true, false, 2'490, 2'500));
  CHECK_FALSE(http_client::answer_timed_out(true, true, 2'499.4, 0));
}

TEST_CASE("the HTTP server refuses oversized bodies with 413") {
  std::string err;
  app::http_server::options o;
  o.max_body = 16;
  auto srv = app::http_server::start("127.0.0.1", 0, handle, &err, o);
  REQUIRE(srv);
  results got;
  server::http_client client;
  client.submit(signed_post(got, 1, srv->port(), "s3cret"));
  auto r = got.await(1);
  CHECK(r.status == 413);
  CHECK(r.body ==
        "{\"error\":\"body over 16 bytes\",\"code\":\"body_too_large\"}\n");  // JSON ending with a
                                                                              // newline
}

TEST_CASE("the HTTP server holds at most max_bodies bytes of bodies past their first 64 KiB: one "
          "that would go past gets 503, a small one never does, and what a request held is free "
          "once it is answered") {
  constexpr size_t k = 1024, free_part = 64 * k;  // a body's first 64 KiB are not counted
  std::string err;
  app::http_server::options o;
  o.max_body = 200 * k;
  o.max_bodies = 150 * k;
  auto srv = app::http_server::start(
      "127.0.0.1", 0,
      [](const app::http_exchange& ex) {
        return app::http_reply{200, "text/plain", ex.body};
      },
      &err, o);
  REQUIRE(srv);
  auto head = [](size_t n) {
    return "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(n) + "\r\n\r\n";
  };
  auto await_held = [&](size_t n) {
    for (int i = 0; i < 2000 && srv->bodies_held() != n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // (polls a condition)
    return srv->bodies_held() == n;
  };
  // 164 KiB announced, 154 KiB sent: 90 KiB counted.
  test::raw_socket slow(srv->port(),
                        head(free_part + 100 * k) + std::string(free_part + 90 * k, 'a'));
  REQUIRE(await_held(90 * k));
  test::raw_socket whole(srv->port(),
                         head(free_part + 100 * k) + std::string(free_part + 100 * k, 'b'));
  auto refused = whole.http_answer(std::chrono::seconds(10));  // 90 + 100 KiB > 150 KiB
  CHECK(refused.rfind("HTTP/1.1 503", 0) == 0);
  CHECK(refused.find("\"code\":\"busy\"") != std::string::npos);
  CHECK(srv->bodies_held() == 90 * k);  // the refused body's bytes were let go
  test::raw_socket small(srv->port(), head(1000) + std::string(1000, 's'));
  CHECK(small.http_answer(std::chrono::seconds(10)).rfind("HTTP/1.1 200", 0) ==
        0);  // never refused for the large ones
  std::string rest(10 * k, 'a');
  REQUIRE(::send(slow.fd, rest.data(), rest.size(), MSG_NOSIGNAL) == ssize_t(rest.size()));
  auto ok = slow.http_answer(std::chrono::seconds(10));
  CHECK(ok.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(ok.find(std::string(free_part + 100 * k, 'a')) != std::string::npos);
  CHECK(await_held(0));
  test::raw_socket again(srv->port(),
                         head(free_part + 100 * k) + std::string(free_part + 100 * k, 'c'));
  CHECK(again.http_answer(std::chrono::seconds(10)).rfind("HTTP/1.1 200", 0) == 0);
}

TEST_CASE("the HTTP client holds at most its max_connections open: more POSTs wait for one and go "
          "out once it frees") {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  holding_endpoint h;
  results got;
  server::http_client client(2);
  for (uint64_t id = 1; id <= 4; ++id)
    client.submit(signed_post(got, id, h.port(), "s3cret"));
  REQUIRE(h.await([](int arrived) { return arrived == 2; }));
  // The other two wait in the client: none arrives while both connections are busy.
  CHECK_FALSE(h.await([](int arrived) { return arrived > 2; }, std::chrono::milliseconds(300)));
  CHECK(h.srv->connections_open() == 2);
  h.release();
  for (uint64_t id = 1; id <= 4; ++id)
    CHECK(got.await(id).status == 200);
  CHECK(h.arrived() == 4);
  // The two held for 300 ms and more; the two that waited for them count their own time only,
  // not the wait (the node's, not the endpoint's).
  CHECK(got.await(1).total_ms >= 300);
  CHECK(got.await(3).total_ms < got.await(1).total_ms);
  CHECK(got.await(4).total_ms < got.await(1).total_ms);
}

TEST_CASE_FIXTURE(
    one_connection_held,
    "a POST that waits for a connection past its time-out is never sent and fails then, "
    "saying why, while the POST holding the connection goes on") {
  auto waits = second();
  waits.timeout_ms = 300;
  client.submit(std::move(waits));
  auto failed = got.await(2);  // while the first still holds the one connection
  CHECK(failed.status == 0);
  CHECK_FALSE(failed.timed_out);  // no endpoint was slow
  CHECK_FALSE(failed.sent);
  CHECK_FALSE(failed.stopping);  // the node's shortage: the endpoint backs off
  CHECK(failed.error ==
        "not sent: no connection free within its 300 ms (all 1 connections that the node's file "
        "descriptors leave the invoker were in use)");
  CHECK(failed.total_ms >= 300);
  CHECK(failed.total_ms < 5000);
  CHECK(h.arrived() == 1);  // never sent
  h.release();
  CHECK(got.await(1).status == 200);
  CHECK(client.in_flight() == 0);
}

TEST_CASE_FIXTURE(
    one_connection_held,
    "a POST that cannot begin within its send_within_ms is not sent, though its time-out "
    "is longer") {
  auto waits = second();
  waits.timeout_ms = 60000;
  waits.send_within_ms = 300;
  client.submit(std::move(waits));
  auto failed = got.await(2);  // while the first still holds the one connection
  CHECK_FALSE(failed.sent);
  CHECK(failed.error.rfind("not sent: no connection free within its 300 ms", 0) == 0);
  CHECK(failed.total_ms >= 300);
  CHECK(failed.total_ms < 5000);
  CHECK(h.arrived() == 1);
  h.release();
  CHECK(got.await(1).status == 200);
}

TEST_CASE_FIXTURE(
    one_connection_held,
    "when the client stops, the POST it was sending is aborted and the one waiting for a "
    "connection is answered as not sent") {
  auto waits = second();
  waits.timeout_ms = 0;  // no deadline: it would wait for ever
  client.submit(std::move(waits));
  client.stop();
  auto sending = got.await(1);
  CHECK(sending.error == "aborted: the server is stopping");
  CHECK(sending.sent);
  CHECK(sending.stopping);
  auto waiting = got.await(2);
  CHECK(waiting.error == "not sent: the server is stopping");
  CHECK_FALSE(waiting.sent);
  CHECK(waiting.stopping);
  CHECK(client.in_flight() == 0);
  CHECK(h.arrived() == 1);
}
