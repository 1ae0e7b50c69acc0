#include <doctest/doctest.h>

#include <set>

#include "protocol/messages.hpp"
#include "samples.hpp"
#include "test_util.hpp"

using namespace fusee::proto;
using fusee::test::from_hex;

namespace {

any_message round_trip(const any_message& m) {
  auto wire = encode(m);
  frame_decoder d;
  d.feed(wire);
  auto f = d.next();
  REQUIRE(f.has_value());
  REQUIRE(f->has_value());
  CHECK(d.buffered() == 0);
  auto back = decode(**f);
  if (!back) FAIL(back.err().to_string());
  return *back;
}

bytes body_of(const any_message& m) {
  bytes out;
  encode_body(m, out);
  return out;
}

}  // namespace

TEST_CASE("every frame kind round trips") {
  std::set<kind> kinds;
  for (const auto& m : fusee::test::sample_messages()) {
    CAPTURE(kind_name(static_cast<uint8_t>(kind_of(m))));
    CHECK_FALSE(validate(m));
    CHECK(round_trip(m) == m);
    kinds.insert(kind_of(m));
  }
  CHECK(kinds.size() == std::variant_size_v<any_message>);  // the samples cover every kind
}

TEST_CASE("requests and answers are decoded only in their direction") {
  auto ping_body = body_of(ping{});
  CHECK(decode_request(6, ping_body).has_value());
  auto r = decode_response(6, ping_body);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.err().code == err_code::unknown_kind);
  auto ok_body = body_of(ok{1, {}});
  CHECK(decode_response(64, ok_body).has_value());
  CHECK(decode_request(64, ok_body).err().code == err_code::unknown_kind);
  CHECK(decode_request(15, ping_body).err().code == err_code::unknown_kind);
  CHECK(decode_request(0, ping_body).err().code == err_code::unknown_kind);
  CHECK(decode(200, ping_body).err().code == err_code::unknown_kind);
}

TEST_CASE("a body with bytes left over is BAD_BODY") {
  auto body = body_of(ping{});
  body.push_back(0);
  auto r = decode(6, body);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.err().code == err_code::bad_body);
  CHECK(r.err().message.find("left over") != std::string::npos);
  CHECK(r.err().message.find("PING") != std::string::npos);
}

TEST_CASE("a bytes or str length over the record limit is TOO_LARGE, before the bytes left are "
          "counted") {
  auto with_length = [](uint64_t len) {
    bytes body;
    writer w{body};
    w.u64(9);       // id
    w.u32(0);       // shard
    w.u64(1);       // epoch
    w.u64(1);       // first_lsn
    w.u32(1);       // one record
    w.varint(len);  // its length, and no bytes
    return decode(2, body);
  };
  auto over = with_length(max_record_size + 1);
  REQUIRE_FALSE(over);
  CHECK(over.err().code == err_code::too_large);
  CHECK(over.err().message.find("exceeds the limit of " + std::to_string(max_record_size)) !=
        std::string::npos);
  auto at = with_length(max_record_size);  // allowed, but the bytes are not there
  REQUIRE_FALSE(at);
  CHECK(at.err().code == err_code::bad_body);
  // a str is a bytes (PROTOCOL.md §1): CALL's method
  bytes call_body;
  writer w{call_body};
  w.u64(3);
  w.u32(0);
  w.u64(0);
  w.varint(uint64_t{1} << 40);
  CHECK(decode(8, call_body).err().code == err_code::too_large);
}

TEST_CASE("a LEASE granting max_shard_count shards fits one frame, one more does not") {
  lease l{1, max_shard_count, 1000, 5000, 0, {}};
  auto empty = body_of(l).size();
  l.grants.push_back(grant_entry{});
  size_t per_grant = body_of(l).size() - empty;
  CHECK(per_grant == 20);
  CHECK(empty + per_grant * max_shard_count <= max_body_size);
  CHECK(empty + per_grant * (uint64_t{max_shard_count} + 1) > max_body_size);
}

TEST_CASE("HELLO: version is checked right after the head, then offers") {
  SUBCASE("version 2 is VERSION even when the rest would not decode") {
    bytes body;
    writer w{body};
    w.u64(1);           // id
    w.u32(0xFFFFFFFF);  // shard
    w.u64(0);           // epoch
    w.u32(2);           // version, and nothing else
    auto r = decode(1, body);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.err().code == err_code::version);
  }
  SUBCASE("unknown offer bits are BAD_OFFER") {
    hello h;
    h.offers = 8;
    auto r = decode(1, body_of(h));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.err().code == err_code::bad_offer);
    CHECK(validate(h)->code == err_code::bad_offer);
  }
  SUBCASE("the invocation id is on the wire only with INVOKED") {
    hello a;
    a.offers = offer_serve_calls;
    hello b = a;
    b.offers |= offer_invoked;
    b.invocation = invocation_id{5};
    CHECK(body_of(b).size() == body_of(a).size() + 8);
  }
  SUBCASE("INVOKED with invocation 0 is refused") {
    hello h;
    h.offers = offer_invoked;
    CHECK(decode(1, body_of(h)).err().code == err_code::unknown_invocation);
  }
  SUBCASE("a HELLO naming a shard is BAD_BODY") {
    hello h;
    h.head.shard = shard_id{0};
    auto r = decode(1, body_of(h));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.err().code == err_code::bad_body);
    CHECK(r.err().message.find("0xFFFFFFFF") != std::string::npos);
  }
}

TEST_CASE("rules of individual kinds") {
  append a{request_head{1, shard_id{0}, epoch_t{1}}, lsn_t{1}, {}};
  CHECK(decode(2, body_of(a)).err().message.find("at least one record") != std::string::npos);
  a.records.push_back(bytes{1});
  a.first_lsn = lsn_t{0};
  CHECK(decode(2, body_of(a)).err().code == err_code::bad_body);

  call_reply cr{request_head{1, shard_id{0}, epoch_t{1}}, 1, 2, {}};
  CHECK(decode(9, body_of(cr)).err().code == err_code::bad_body);

  idle i{request_head{}, {idle_entry{shard_id{1}, epoch_t{1}, 4, 0, 0, 0, {}}}};
  CHECK(decode(13, body_of(i)).err().message.find("unknown bits") != std::string::npos);
  CHECK(validate(i));

  call_result res{1, 5, {}};
  CHECK(decode(72, body_of(res)).err().code == err_code::bad_body);
  log_page lp{1, shard_id{0}, lsn_t{1}, {}, 2, lsn_t{0}};
  CHECK(decode(69, body_of(lp)).err().code == err_code::bad_body);
  err e{1, 0, "x"};
  CHECK(decode(65, body_of(e)).err().code == err_code::bad_body);
  err future{1, 999, "a code from a later version"};
  CHECK(decode(65, body_of(future)).has_value());
}

TEST_CASE("OK answering CLIENT_HELLO carries shard_count") {
  auto m = make_client_hello_ok(3, 16);
  CHECK(body_of(m) == from_hex("0300000000000000 10000000"));
  CHECK(client_hello_shard_count(m) == 16u);
  CHECK_FALSE(client_hello_shard_count(ok{3, {}}));
}

TEST_CASE("an ERR answers with the refused request's id") {
  auto e = make_err(42, error{err_code::lsn_gap, "expected first_lsn 5, got 7"});
  CHECK(e.id == 42);
  CHECK(e.code == 6);
  CHECK(std::string{name(err_code::lsn_gap)} == "LSN_GAP");
}

TEST_CASE("an APPEND decoded as views holds the records decode() gives, pointing into the body") {
  append a{
      request_head{7, shard_id{3}, epoch_t{2}}, lsn_t{5}, {bytes{1, 2, 3}, bytes{}, bytes(300, 9)}};
  auto body = body_of(a);
  auto v = decode_append_view(body);
  if (!v) FAIL(v.err().to_string());
  CHECK(v->head == a.head);
  CHECK(v->first_lsn == a.first_lsn);
  REQUIRE(v->records.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(bytes(v->records[i].begin(), v->records[i].end()) == a.records[i]);
    if (v->records[i].empty()) continue;
    CHECK(v->records[i].data() >= body.data());
    CHECK(v->records[i].data() + v->records[i].size() <= body.data() + body.size());
  }
}

TEST_CASE("an APPEND decoded as views is refused with the errors decode() gives") {
  auto same_error = [](const bytes& body) {
    auto whole = decode(2, body);
    auto view = decode_append_view(body);
    REQUIRE_FALSE(whole);
    REQUIRE_FALSE(view);
    CHECK(view.err().code == whole.err().code);
    CHECK(view.err().message == whole.err().message);
  };
  append a{request_head{1, shard_id{0}, epoch_t{1}}, lsn_t{1}, {}};
  same_error(body_of(a));  // no record
  a.records.push_back(bytes{1});
  a.first_lsn = lsn_t{0};
  same_error(body_of(a));  // LSN 0
  a.first_lsn = lsn_t{1};
  a.records.push_back(bytes(max_record_size + 1, 0));
  same_error(body_of(a));  // a record over the limit
  auto body = body_of(append{request_head{1, shard_id{0}, epoch_t{1}}, lsn_t{1}, {bytes{1}}});
  body.push_back(0);
  same_error(body);  // bytes left over
  body.resize(body.size() - 3);
  same_error(body);  // cut short
}

TEST_CASE("a frame's lists hold at most one string per 16 bytes of its body, and at least 4096 "
          "in any frame: more is TOO_LARGE") {
  auto hello_with = [](size_t n, const std::string& type) {
    hello h;
    h.head = request_head{1};
    h.name = "w";
    h.types.assign(n, type);
    return decode(static_cast<uint8_t>(hello::tag), body_of(h));
  };
  CHECK(hello_with(4096, "").has_value());
  auto over = hello_with(4097, "");  // a 4 KiB body: 4096 is its bound
  REQUIRE_FALSE(over);
  CHECK(over.err().code == err_code::too_large);
  CHECK(over.err().message ==
        "HELLO: types: the frame's lists hold more than 4096 strings (one per 16 bytes of the "
        "body, and at least 4096 in any frame)");
  // A MiB of empty types (a million strings, ~32 MiB in memory) is refused the same way; names
  // of 16 bytes (17 on the wire) are allowed as many as fit.
  CHECK(hello_with(1 << 20, "").err().code == err_code::too_large);
  CHECK(hello_with(100'000, "checkout-flow-v2").has_value());

  // The bound is the frame's, over all its lists: IDLE entries' types together.
  idle i;
  i.head = request_head{2};
  for (uint32_t s = 0; s < 3; ++s) {
    idle_entry e;
    e.shard = shard_id{s};
    e.epoch = epoch_t{1};
    e.types.assign(1500, "");
    i.entries.push_back(e);
  }
  auto idle_over = decode(static_cast<uint8_t>(idle::tag), body_of(i));
  REQUIRE_FALSE(idle_over);
  CHECK(idle_over.err().code == err_code::too_large);
  i.entries.pop_back();
  CHECK(decode(static_cast<uint8_t>(idle::tag), body_of(i)).has_value());
}

TEST_CASE("an APPEND or a LOG_PAGE holds at most one record per 4 bytes of its body, and at "
          "least 4096 in any frame, as views or as copies") {
  auto append_of = [](size_t n, size_t size) {
    return body_of(append{request_head{1, shard_id{0}, epoch_t{1}}, lsn_t{1},
                          std::vector<bytes>(n, bytes(size, 7))});
  };
  CHECK(decode_append_view(append_of(4096, 0)).has_value());
  auto over = decode_append_view(append_of(4097, 0));
  REQUIRE_FALSE(over);
  CHECK(over.err().code == err_code::too_large);
  CHECK(over.err().message ==
        "APPEND: records: the frame's lists hold more than 4096 records (one per 4 bytes of the "
        "body, and at least 4096 in any frame)");
  CHECK(decode(static_cast<uint8_t>(append::tag), append_of(4097, 0)).err().code ==
        err_code::too_large);
  // A million empty records (16 MiB of views for a MiB on the wire) are refused; records of 3
  // bytes (4 on the wire) are never refused for their number, shorter ones past 4,096 are.
  CHECK(decode_append_view(append_of(1 << 20, 0)).err().code == err_code::too_large);
  CHECK(decode_append_view(append_of(1 << 20, 3)).has_value());
  CHECK(decode_append_view(append_of(12'000, 2)).err().code == err_code::too_large);
  // The same bound for what a worker reads.
  log_page page{1, shard_id{0}, lsn_t{1}, std::vector<bytes>(5000, bytes{}), 1, lsn_t{5000}};
  CHECK(decode(static_cast<uint8_t>(log_page::tag), body_of(page)).err().code ==
        err_code::too_large);
  page.records.assign(5000, bytes(3, 1));
  CHECK(decode(static_cast<uint8_t>(log_page::tag), body_of(page)).has_value());
}

TEST_CASE("a batch takes its first record whatever its size, then more within its byte limit and "
          "within the records its reader's decoder takes") {
  CHECK(batch_takes(0, 0, 1000, 10));
  CHECK(batch_takes(1, 5, 5, 10));
  CHECK_FALSE(batch_takes(1, 5, 6, 10));
  CHECK(batch_takes(4095, 0, 0, UINT64_MAX));
  CHECK_FALSE(batch_takes(4096, 0, 0, UINT64_MAX));  // a 4,097th empty record
  CHECK_FALSE(batch_takes(5000, 10'000, 2, UINT64_MAX));
  CHECK(batch_takes(100'000, 300'000, 3, UINT64_MAX));  // 3-byte records: never cut for number
  // Whatever batch_takes lets through, the decoder takes.
  std::vector<bytes> records;
  uint64_t sum = 0;
  while (batch_takes(records.size(), sum, 1, UINT64_MAX)) {
    records.emplace_back(1, 9);
    sum += 1;
  }
  CHECK(records.size() == 4096);  // 1-byte records are 2 on the wire: 4,096 in any frame
  CHECK(decode_append_view(
            body_of(append{request_head{1, shard_id{0}, epoch_t{1}}, lsn_t{1}, records}))
            .has_value());
  records.emplace_back(1, 9);
  CHECK_FALSE(decode_append_view(
      body_of(append{request_head{1, shard_id{0}, epoch_t{1}}, lsn_t{1}, records})));
}
