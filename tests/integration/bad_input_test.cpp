// Malformed input gets a clear ERR and closes only its own connection; a ready file that cannot
// be written stops the process.
#include <csignal>
#include <fstream>

#include <sys/wait.h>

#include "protocol/crc32c.hpp"
#include "raw_socket.hpp"
#include "server_process.hpp"
#include "worker.hpp"
#include "worker_process.hpp"

using namespace fusee;
using namespace fusee::test;
using proto::err_code;

namespace {

/// Sends `raw` on a fresh connection and returns the ERR that comes back; checks the close.
proto::err refused(server_process& s, const proto::bytes& raw) {
  peer p{s.connect()};
  REQUIRE(p.conn.send_raw(raw));
  auto e = p.expect<proto::err>();
  auto after = p.conn.receive(std::chrono::seconds(5));
  CHECK_FALSE(after);
  CHECK(p.conn.closed());
  return e;
}

proto::bytes frame_with_body(uint8_t kind, const proto::bytes& body) {
  return proto::encode_frame(kind, body);
}

}  // namespace

TEST_CASE("bad frames and bodies: a clear ERR, that connection closes, others keep working") {
  temp_dir tmp;
  server_process s(tmp.path() / "data", "[server]\nshards = 2\n");
  REQUIRE(s.start().empty());
  peer w{s.connect()};
  auto lease = w.hello();
  pinger keep{w.conn, std::chrono::milliseconds(200)};
  uint64_t e = lease.grants[0].epoch.value();

  SUBCASE("wrong magic") {
    auto err = refused(s, record("GET / HTTP/1.1\r\n\r\n"));
    CHECK(err.code == uint16_t(err_code::bad_frame));
    CHECK(err.id == 0);
    CHECK(err.message.find("magic") != std::string::npos);
  }
  SUBCASE("bad checksum") {
    auto f = proto::encode(proto::ping{proto::request_head{5}});
    f[9] ^= 0xFF;
    auto err = refused(s, f);
    CHECK(err.code == uint16_t(err_code::bad_frame));
    CHECK(err.id == 0);
  }
  SUBCASE("oversize") {
    proto::bytes hdr = {'F', 'S', 'E', '1', 2};
    proto::writer wr{hdr};
    wr.u32(proto::max_body_size + 1);
    wr.u32(0);
    auto err = refused(s, hdr);
    CHECK(err.code == uint16_t(err_code::too_large));
  }
  SUBCASE("unknown kind, with the request's id") {
    proto::bytes body;
    proto::writer wr{body};
    wr.u64(77);
    auto err = refused(s, frame_with_body(50, body));
    CHECK(err.code == uint16_t(err_code::unknown_kind));
    CHECK(err.id == 77);
  }
  SUBCASE("the token extension's kinds are unknown here, whatever their bodies hold") {
    for (uint8_t kind : {uint8_t{48}, uint8_t{49}}) {
      CAPTURE(int(kind));
      proto::bytes body;
      proto::writer wr{body};
      wr.u64(76);  // an id and nothing else: neither AUTH nor AUTH_PROOF would decode
      auto err = refused(s, frame_with_body(kind, body));
      CHECK(err.code == uint16_t(err_code::unknown_kind));
      CHECK(err.id == 76);
      CHECK(err.message.find("it has no tokens") != std::string::npos);
    }
  }
  SUBCASE("a bytes field longer than a record is TOO_LARGE, though the frame is short") {
    proto::bytes body;
    proto::writer wr{body};
    wr.u64(75);
    wr.u32(0xFFFFFFFF);
    wr.u64(0);
    wr.u32(1);                              // version
    wr.u32(0);                              // offers
    wr.u32(0);                              // max_shards
    wr.varint(proto::max_record_size + 1);  // the name's length, and no bytes after it
    auto err = refused(s, frame_with_body(1, body));
    CHECK(err.code == uint16_t(err_code::too_large));
    CHECK(err.id == 75);
  }
  SUBCASE("a body that does not decode") {
    proto::bytes body;
    proto::writer wr{body};
    wr.u64(78);
    wr.u32(1);  // a truncated HELLO head
    auto err = refused(s, frame_with_body(1, body));
    CHECK(err.code == uint16_t(err_code::bad_body));
    CHECK(err.id == 78);
  }
  SUBCASE("a first frame that is not HELLO") {
    auto err = refused(s, proto::encode(proto::ping{proto::request_head{79}}));
    CHECK(err.code == uint16_t(err_code::bad_body));
    CHECK(err.id == 79);
  }
  SUBCASE("a second HELLO") {
    peer p{s.connect()};
    p.hello();
    proto::hello h;
    h.head.id = 80;
    REQUIRE(p.conn.send(h));
    auto err = p.expect<proto::err>();
    CHECK(err.code == uint16_t(err_code::bad_body));
    CHECK_FALSE(p.conn.receive(std::chrono::seconds(5)));
  }
  SUBCASE("wrong version") {
    proto::bytes body;
    proto::writer wr{body};
    wr.u64(81);
    wr.u32(0xFFFFFFFF);
    wr.u64(0);
    wr.u32(2);
    auto err = refused(s, frame_with_body(1, body));
    CHECK(err.code == uint16_t(err_code::version));
    CHECK(err.id == 81);
  }
  SUBCASE("unknown offers") {
    proto::hello h;
    h.head.id = 82;
    h.offers = 8;
    auto err = refused(s, proto::encode(h));
    CHECK(err.code == uint16_t(err_code::bad_offer));
  }
  SUBCASE("an invocation this server does not know") {
    proto::hello h;
    h.head.id = 83;
    h.offers = proto::offer_invoked;
    h.invocation = proto::invocation_id{0x1234};
    auto err = refused(s, proto::encode(h));
    CHECK(err.code == uint16_t(err_code::unknown_invocation));
  }
  // Whatever happened on the other connection, the worker is still served.
  w.append(0, e, 1, {record("still here")});
  REQUIRE(w.wait_durable(0, 1));
}

TEST_CASE("a ready file that cannot be written stops the server and the handler with an error "
          "naming it, and one written is removed when the server stops") {
  test::temp_dir tmp;
  auto nowhere = (tmp.path() / "no-such-dir" / "ready").string();
  auto [rc, out] = test::run_process({test::fusee_binary(), "server", "--data-dir",
                                      (tmp.path() / "data").string(), "--listen", "127.0.0.1:0",
                                      "--admin-listen", "127.0.0.1:0", "--http-listen", "off",
                                      "--inspect-listen", "off", "--ready-file", nowhere},
                                     tmp.path() / "server.log", 30s);
  CHECK(rc == 1);
  CHECK_MESSAGE(out.find("cannot write the ready file " + nowhere +
                         ".tmp: No such file or "
                         "directory: stopping") != std::string::npos,
                out);
  std::ofstream(tmp.path() / "secret") << "s3cret-s3cret-s3cret\n";
  auto [hrc, hout] = test::run_process({test::fusee_binary(), "handler", "--listen", "127.0.0.1:0",
                                        "--secret-file", (tmp.path() / "secret").string(), "--mode",
                                        "echo", "--ready-file", nowhere},
                                       tmp.path() / "handler.log", 30s);
  CHECK(hrc == 1);
  CHECK_MESSAGE(hout.find("cannot write the ready file " + nowhere) != std::string::npos, hout);
  // Written once serving (a stale one, there before, replaced), removed at stop.
  auto ready = tmp.path() / "ready";
  std::ofstream(ready) << "listen=127.0.0.1:1\n";
  int pid = test::spawn_process({test::fusee_binary(), "server", "--data-dir",
                                 (tmp.path() / "data").string(), "--listen", "127.0.0.1:0",
                                 "--admin-listen", "127.0.0.1:0", "--http-listen", "off",
                                 "--inspect-listen", "off", "--ready-file", ready.string()},
                                tmp.path() / "server2.log");
  auto written = [&] {
    std::ifstream in(ready);
    std::string line;
    return std::getline(in, line) && line != "listen=127.0.0.1:1";
  };
  CHECK(test::await(written, 20s));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK_FALSE(std::filesystem::exists(ready));
}

TEST_CASE("malformed HTTP requests leave one line of each kind of libmicrohttpd's a minute in the "
          "log, not one each, and the admin server keeps answering") {
  test::temp_dir tmp;
  server_process s(tmp.path() / "data", "[server]\nshards = 2\n");
  REQUIRE(s.start().empty());
  for (int i = 0; i < 20; ++i) {
    raw_socket bad(s.admin_port(),
                   "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n");
    CHECK(bad.closed_within(5s));
  }
  auto [status, body] = http_get(s.admin_port(), "/healthz");
  CHECK(status == 200);
  auto log = s.log();
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (auto at = log.find(what); at != std::string::npos; at = log.find(what, at + 1))
      ++n;
    return n;
  };
  // (Each request makes two kinds: the header that does not parse, and the request's error.)
  CHECK_MESSAGE(count("Failed to parse") == 1, log);
  CHECK_MESSAGE(count("HTTP server 127.0.0.1:") <= 3, log);
}
