// Calls relayed to holders (held, parked, expired, holder lost) and cross-shard messages.
#include "server_process.hpp"
#include "worker.hpp"

using namespace fusee;
using namespace fusee::test;

namespace {

struct fixture : server_fixture {
  using server_fixture::server_fixture;
  peer client() {
    peer c{server.connect()};
    REQUIRE(c.conn.send(proto::client_hello{proto::request_head{1}, 1, "test-client"}));
    auto ok = c.expect<proto::ok>();
    CHECK(proto::client_hello_shard_count(ok) == 4u);
    return c;
  }
  peer worker() { return connect(); }
};

void call(peer& c, uint64_t id, uint32_t shard, uint32_t park_ms = 5000) {
  REQUIRE(
      c.conn.send(proto::call{proto::request_head{id, proto::shard_id{shard}, proto::epoch_t{0}},
                              "start", "order", record(R"({"n":1})"), park_ms}));
}

std::string text(const proto::bytes& b) {
  return std::string(b.begin(), b.end());
}

}  // namespace

TEST_CASE("a call to a held shard is relayed to its holder and the reply comes back") {
  fixture f;
  auto w = f.worker();
  auto lease = w.hello();
  auto c = f.client();
  call(c, 10, 2);
  auto rc = w.expect<proto::relayed_call>();
  CHECK(rc.shard.value() == 2);
  CHECK(rc.method == "start");
  CHECK(rc.type == "order");
  CHECK(text(rc.args) == R"({"n":1})");
  REQUIRE(w.conn.send(proto::call_reply{
      proto::request_head{0, proto::shard_id{2}, proto::epoch_t{epoch_of(lease.grants, 2)}},
      rc.relay, 1, record(R"({"id":"wf-1"})")}));
  auto res = c.expect<proto::call_result>();
  CHECK(res.id == 10);
  CHECK(res.status == uint8_t(proto::call_status::ok));
  CHECK(text(res.body) == R"({"id":"wf-1"})");
  // An error reply is status 1; a second reply to the same relay is ignored.
  call(c, 11, 2);
  auto rc2 = w.expect<proto::relayed_call>();
  auto head = proto::request_head{0, proto::shard_id{2}, proto::epoch_t{epoch_of(lease.grants, 2)}};
  REQUIRE(w.conn.send(proto::call_reply{head, rc2.relay, 0, record(R"({"error":"no"})")}));
  REQUIRE(w.conn.send(proto::call_reply{head, rc2.relay, 1, record(R"({})")}));
  auto res2 = c.expect<proto::call_result>();
  CHECK(res2.id == 11);
  CHECK(res2.status == uint8_t(proto::call_status::failed));
  CHECK_FALSE(c.conn.receive(std::chrono::milliseconds(200)));
}

TEST_CASE("a call with no holder is parked until a worker takes the shard") {
  fixture f;
  auto c = f.client();
  call(c, 20, 1);
  auto w = f.worker();
  auto lease = w.hello();
  auto rc = w.expect<proto::relayed_call>();
  CHECK(rc.shard.value() == 1);
  REQUIRE(w.conn.send(proto::call_reply{
      proto::request_head{0, proto::shard_id{1}, proto::epoch_t{epoch_of(lease.grants, 1)}},
      rc.relay, 1, record("true")}));
  auto res = c.expect<proto::call_result>();
  CHECK(res.id == 20);
  CHECK(res.status == 0);
}

TEST_CASE("a parked call expires with status 2 and a JSON error") {
  fixture f{"[server]\nshards = 4\n[invoker]\npark_ms = 5000\n"};
  auto c = f.client();
  auto t0 = std::chrono::steady_clock::now();
  call(c, 30, 3, 150);  // the client asks for less than the server's limit
  auto res = c.expect<proto::call_result>();
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(res.id == 30);
  CHECK(res.status == uint8_t(proto::call_status::parked_too_long));
  CHECK(text(res.body).find("\"error\"") != std::string::npos);
  CHECK(waited >= std::chrono::milliseconds(150));
}

TEST_CASE("a call written right after a DRAIN of its shard finds the shard draining: parked, "
          "not relayed to the holder") {
  // The DRAIN goes through the session actor, the CALL could go from the I/O thread straight to
  // the directory: it must not overtake the DRAIN written before it.
  fixture f;
  auto w = f.worker();
  w.hello();
  auto frames = proto::encode(proto::drain{proto::request_head{7}, {proto::shard_id{1}}});
  auto c = proto::encode(proto::call{proto::request_head{8, proto::shard_id{1}, proto::epoch_t{0}},
                                     "start", "order", record("{}"), 100});
  frames.insert(frames.end(), c.begin(), c.end());
  REQUIRE(w.conn.send_raw(frames));
  CHECK(w.expect<proto::ok>().id == 7);  // a RELAYED_CALL first fails here
  auto res = w.expect<proto::call_result>();
  CHECK(res.id == 8);
  CHECK(res.status == uint8_t(proto::call_status::parked_too_long));
}

TEST_CASE("a call whose holder goes away in flight fails with status 3, bad shards with 4") {
  fixture f;
  auto w = f.worker();
  w.hello();
  auto c = f.client();
  call(c, 40, 0);
  w.expect<proto::relayed_call>();
  w.conn.close();
  auto res = c.expect<proto::call_result>();
  CHECK(res.id == 40);
  CHECK(res.status == uint8_t(proto::call_status::holder_lost));
  CHECK(text(res.body).find("may have run") != std::string::npos);
  call(c, 41, 99);
  auto bad = c.expect<proto::call_result>();
  CHECK(bad.status == uint8_t(proto::call_status::bad_request));
}

TEST_CASE("messages are relayed to the target's holder or parked, acks go back to the sender") {
  fixture f;
  auto w1 = f.worker();
  auto l1 = w1.hello(proto::offer_serve_calls, 2);  // shards 0 and 1
  auto w2 = f.worker();
  auto l2 = w2.hello(proto::offer_serve_calls, 1);  // shard 2; shard 3 stays free
  REQUIRE(l1.grants.size() == 2);
  REQUIRE(l2.grants.size() == 1);
  uint32_t from = l1.grants[0].shard.value();
  uint64_t from_epoch = l1.grants[0].epoch.value();
  uint32_t target = l2.grants[0].shard.value();
  auto head = proto::request_head{0, proto::shard_id{from}, proto::epoch_t{from_epoch}};
  REQUIRE(w1.conn.send(proto::relay{head, proto::shard_id{target}, 7, record("hello")}));
  auto m = w2.expect<proto::message>();
  CHECK(m.target.value() == target);
  CHECK(m.from.value() == from);
  CHECK(m.from_epoch.value() == from_epoch);
  CHECK(m.outbox_id == 7);
  CHECK(text(m.payload) == "hello");
  REQUIRE(w2.conn.send(
      proto::message_ack{proto::request_head{0, proto::shard_id{target}, l2.grants[0].epoch},
                         m.from, m.from_epoch, 7}));
  auto a = w1.expect<proto::ack>();
  CHECK(a.from.value() == from);
  CHECK(a.outbox_id == 7);

  // Shard 3 has no holder: the message waits for one.
  uint32_t free_shard = 6 - from - l1.grants[1].shard.value() - target;
  REQUIRE(w1.conn.send(proto::relay{head, proto::shard_id{free_shard}, 8, record("later")}));
  auto w3 = f.worker();
  auto l3 = w3.hello();
  REQUIRE(l3.grants.size() == 1);
  auto m2 = w3.expect<proto::message>();
  CHECK(m2.target.value() == free_shard);
  CHECK(text(m2.payload) == "later");

  // A RELAY from a shard the sender does not hold is refused and nothing is relayed.
  REQUIRE(w1.conn.send(
      proto::relay{proto::request_head{55, proto::shard_id{target}, l2.grants[0].epoch},
                   proto::shard_id{from}, 9, record("forged")}));
  auto err = w1.expect<proto::err>();
  CHECK(err.id == 55);
  CHECK(err.code == uint16_t(proto::err_code::not_holder));
}
