// The directory's lease rules under CAF's deterministic test scheduler, with a fake log and fake
// sessions: nothing runs unless the test drives it, the log "commits" when the test says so, and
// timers fire when the test advances the clock.
#include <doctest/doctest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>

#include "actors/directory.hpp"
#include "actors/inspect/shard_state.hpp"
#include "actors/wake_records.hpp"
#include "deterministic_config.hpp"
#include "protocol/invocation_request.hpp"
#include "protocol/json_text.hpp"
#include "protocol/messages.hpp"

using namespace fusee;
using namespace fusee::server;
using namespace std::chrono_literals;

namespace {

using test_config = fusee::test::deterministic_config;

/// What happened, in order: log entries and frames the sessions got, as text ("revoke 1",
/// "REVOKED to 1", ...), so tests can check that the log hears of a change first.
using journal = std::vector<std::string>;

/// The log: records grants and revocations; commit() answers them as the writer would.
struct fake_log : lease_log {
  struct entry {
    bool grant = false;
    uint64_t token = 0;
    session_id session = 0;
    uint32_t shard = 0;
  };
  std::vector<entry> queued;
  std::vector<entry> all;
  std::map<uint32_t, uint64_t> epochs;  ///< last granted, by shard
  journal* events = nullptr;

  void grant(uint64_t token, session_id session, proto::shard_id shard) override {
    queued.push_back({true, token, session, shard.value()});
    all.push_back(queued.back());
    events->push_back("grant " + std::to_string(shard.value()));
  }
  /// The grants the directory asked to be made at once, by shard; made (reported with the next
  /// commit(), as if answered already) when `make_at_once`, declined otherwise.
  std::vector<uint32_t> asked_at_once;
  bool make_at_once = false;
  bool grant_at_once(uint64_t token, session_id session, proto::shard_id shard) override {
    asked_at_once.push_back(shard.value());
    if (!make_at_once) return false;
    queued.push_back({true, token, session, shard.value()});
    all.push_back(queued.back());
    events->push_back("grant at once " + std::to_string(shard.value()));
    return true;
  }
  size_t revoke_calls = 0;  ///< revoke() calls (each may queue several)
  /// Frames sent to sessions and not yet taken by them (the test scheduler runs them later), at
  /// each revoke() call: 0 means nobody heard anything of this handler before the log did.
  std::function<size_t()> frames_pending;
  std::vector<size_t> frames_pending_at_revoke;
  void revoke(std::vector<revocation> rs) override {
    revoke_calls++;
    frames_pending_at_revoke.push_back(frames_pending ? frames_pending() : 0);
    for (auto& r : rs) {
      queued.push_back({false, r.token, 0, r.shard.value()});
      all.push_back(queued.back());
      events->push_back("revoke " + std::to_string(r.shard.value()));
    }
  }
  proto::epoch_t recovered_epoch(proto::shard_id shard) const override {
    auto i = epochs.find(shard.value());
    return proto::epoch_t{i == epochs.end() ? 0 : i->second};
  }
  size_t grants() const {
    return static_cast<size_t>(
        std::count_if(all.begin(), all.end(), [](auto& e) { return e.grant; }));
  }
};

/// A connection as the directory sees it: records every frame it is told to send.
struct connection {
  session_id id = 0;
  session_actor handle;
  std::vector<proto::any_message> frames;
  bool closed = false;
  journal* events = nullptr;

  template <class T>
  std::vector<T> all() const {
    std::vector<T> out;
    for (auto& f : frames)
      if (auto* t = std::get_if<T>(&f)) out.push_back(*t);
    return out;
  }
  template <class T>
  T last() const {
    auto v = all<T>();
    REQUIRE_MESSAGE(!v.empty(), "no " << proto::kind_name(static_cast<uint8_t>(T::tag)));
    return v.back();
  }
};

proto::any_message decode_frame(const proto::bytes& frame) {
  proto::frame_decoder d;
  d.feed(frame);
  auto f = d.next();
  REQUIRE(f);
  REQUIRE(*f);
  auto m = proto::decode((*f)->kind, (*f)->body);
  REQUIRE(m);
  return std::move(*m);
}

session_actor::behavior_type session_stub(session_actor::pointer, connection* c) {
  auto record = [c](const proto::bytes& frame) {
    c->frames.push_back(decode_frame(frame));
    c->events->push_back(proto::kind_name(static_cast<uint8_t>(proto::kind_of(c->frames.back()))) +
                         " to " + std::to_string(c->id));
  };
  return {
      [=](frame_atom, const proto::bytes& frame) { record(frame); },
      [=](close_atom, const proto::bytes& frame) {
        record(frame);
        c->closed = true;
      },
      [=](overflow_atom) {},
      [=](stats_atom) {
        return actor_stats{"session", c->id};
      },
  };
}

/// The invoker's scheduler as the directory sees it: holds each bind until the test answers.
using binder_stub_actor = binder_actor::extend<caf::reacts_to<caf::ok_atom, bind_result>>;

/// What the directory told the scheduler.
struct binder_log {
  std::vector<std::string> halts;  ///< to stop, and why
  std::vector<std::string> heard;  ///< "put", "halt" and "withheld", in order
  std::vector<withheld_shards> withheld;
  std::vector<uint32_t> held_at_start;  ///< the shards held when it was told it may dispatch
  /// Told that it may dispatch.
  bool started() const { return std::find(heard.begin(), heard.end(), "put") != heard.end(); }
};

struct binder_state {
  std::deque<caf::typed_response_promise<bind_result>> waiting;
  binder_log* log = nullptr;
};

binder_stub_actor::behavior_type binder_stub(binder_stub_actor::stateful_pointer<binder_state> self,
                                             binder_log* log) {
  self->state.log = log;
  return {
      [=](caf::put_atom, const std::vector<uint32_t>& held) {
        self->state.log->heard.push_back("put");
        self->state.log->held_at_start = held;
      },
      [=](const withheld_shards& w) {
        self->state.log->withheld.push_back(w);
        self->state.log->heard.push_back("withheld");
      },
      [=](halt_atom, const std::string& why) {
        self->state.log->halts.push_back(why);
        self->state.log->heard.push_back("halt");
      },
      [=](const bind_request&) -> caf::typed_response_promise<bind_result> {
        auto rp = self->make_response_promise<bind_result>();
        self->state.waiting.push_back(rp);
        return rp;
      },
      [=](caf::ok_atom, bind_result& r) {  // answers the oldest waiting bind
        if (self->state.waiting.empty()) return;
        self->state.waiting.front().deliver(std::move(r));
        self->state.waiting.pop_front();
      },
  };
}

/// A wake record: records what the directory tells it.
struct wake_log {
  std::vector<int32_t> leased;
  std::vector<lease_end> ended;
  std::vector<uint8_t> due;
  std::vector<std::string> start_types;  ///< each due_atom's start type ("" for none)
  std::vector<uint8_t> undue;
};

shard_actor::behavior_type wake_stub(shard_actor::pointer, wake_log* log) {
  return {
      [=](due_atom, uint8_t reasons, const std::string& type) {
        log->due.push_back(reasons);
        log->start_types.push_back(type);
      },
      [=](undue_atom, uint8_t reasons) { log->undue.push_back(reasons); },
      [=](leased_atom, int32_t endpoint) { log->leased.push_back(endpoint); },
      [=](const lease_end& e) { log->ended.push_back(e); },
      [=](retire_atom) { return resting_record{}; },  // never rests
      [=](stats_atom) {
        return actor_stats{"shard", 0};
      },
  };
}

/// The endpoint that owns an invocation, as the directory sees it.
struct endpoint_log {
  std::vector<invocation_leased> leased;
  std::vector<shard_reported> reports;
};

invocation_actor::behavior_type endpoint_stub(invocation_actor::pointer, endpoint_log* log) {
  return {
      [=](const invocation_leased& l) { log->leased.push_back(l); },
      [=](const shard_reported& r) { log->reports.push_back(r); },
  };
}

/// The epoch `c` holds `shard` under, from its LEASE or GRANTs (defined below); 0 if none.
uint64_t epoch_of(const connection& c, uint32_t shard);

struct fixture {
  test_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched =
      dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  journal events;
  fake_log log;
  directory_actor dir;
  std::deque<connection> conns;  // stable addresses: the stubs hold pointers
  session_id next_id = 1;
  bool log_failed_told = false;
  std::set<uint32_t> unwritten;  ///< shards whose revoked lease the log says wrote nothing

  explicit fixture(uint32_t shards = 4, uint32_t park_ms = 30000, uint32_t retire_idle_ms = 60000,
                   std::function<void(node_settings&)> tweak = {}) {
    log.events = &events;
    log.frames_pending = [this] {
      size_t n = 0;
      for (auto* job : sched.jobs)
        for (auto& c : conns)
          if (dynamic_cast<caf::abstract_actor*>(job) ==
              caf::actor_cast<caf::abstract_actor*>(c.handle))
            n++;
      return n;
    };
    node_settings s;
    s.shards = shards;
    s.park_ms = park_ms;
    s.retire_idle_ms = retire_idle_ms;
    if (tweak) tweak(s);
    dir = spawn_directory(sys, s, &log);
    sched.run();
  }
  ~fixture() {
    caf::anon_send_exit(dir, caf::exit_reason::user_shutdown);
    for (auto& c : conns)
      caf::anon_send_exit(c.handle, caf::exit_reason::user_shutdown);
    sched.run();
  }
  void run() { sched.run(); }
  /// The directory's answer to `msg`. (The result comes as an argument: CAF 0.17 binds a null
  /// tuple for a function with none, which UBSan reports.)
  template <class Reply, class... Ts>
  Reply ask(Ts... msg) {
    auto out = std::make_shared<Reply>();
    sys.spawn(
        [d = dir, msg...](caf::event_based_actor* self, std::shared_ptr<Reply> into) {
          self->request(d, caf::infinite, msg...).then([=](Reply& r) { *into = std::move(r); });
        },
        out);
    run();
    return *out;
  }
  /// The directory's introspection row.
  actor_stats stats() { return ask<actor_stats>(stats_atom::value); }
  /// The directory's full views of shards `from`..`to`, as the inspector asks for its page.
  std::vector<shard_lease_view> view(uint32_t from, uint32_t to) {
    shard_details_request req;
    for (uint32_t s = from; s <= to; ++s)
      req.shards.push_back(s);
    return ask<lease_details>(req).shards;
  }
  /// Its byte per shard of `from`..`to` (lease_mark_of), the inspector's states.
  std::string marks(uint32_t from, uint32_t to) {
    return ask<std::string>(view_atom::value, from, to);
  }

  connection& connect() {
    auto& c = conns.emplace_back();
    c.id = next_id++;
    c.events = &events;
    c.handle = sys.spawn(session_stub, &c);
    return c;
  }
  origin from(connection& c, uint64_t request, uint32_t shard = 0xFFFFFFFFu, uint64_t epoch = 0) {
    return origin{c.id, c.handle, request, shard, epoch};
  }
  /// A worker's HELLO (request id 1).
  connection& worker(uint32_t max_shards = 0, bool serve_calls = true) {
    auto& c = connect();
    caf::anon_send(dir, hello_request{from(c, 1), max_shards, serve_calls, 0});
    run();
    return c;
  }
  /// The log writes everything queued as one batch and reports it, as the writer does (only the
  /// first `n` entries when given: the rest go into a later batch). With a `failure`, the batch
  /// failed: its grants were not made and its revocations come back with the failure.
  void commit(uint64_t durable_lsn = 0, size_t n = SIZE_MAX, std::string failure = {}) {
    bool fail_grants = !failure.empty();
    if (fail_grants && !log_failed_told) {  // as the writer tells it, before the batch's reports
      log_failed_told = true;
      caf::anon_send(dir, log_failed{failure});
    }
    grants_made made;
    revocations_done revoked;
    revoked.failure = failure;
    std::vector<fake_log::entry> later;
    if (n < log.queued.size()) {
      later.assign(log.queued.begin() + static_cast<ptrdiff_t>(n), log.queued.end());
      log.queued.resize(n);
    }
    for (auto& e : log.queued) {
      if (e.grant)
        made.grants.push_back(grant_done{e.token, e.session, e.shard,
                                         fail_grants ? 0 : ++log.epochs[e.shard], durable_lsn});
      else
        revoked.revoked.push_back(revocation_done{e.token, e.shard, !unwritten.count(e.shard)});
    }
    log.queued = std::move(later);
    if (!made.grants.empty()) caf::anon_send(dir, std::move(made));
    if (!revoked.revoked.empty()) caf::anon_send(dir, std::move(revoked));
    run();
  }
  void end(connection& c, bool silent = false) {
    caf::anon_send(dir, session_ended{c.id, silent});
    run();
  }
  /// DRAIN `shards` from worker `w` (request `id`).
  void drain(connection& w, uint64_t id, std::vector<uint32_t> shards) {
    caf::anon_send(dir, drain_request{from(w, id), std::move(shards)});
    run();
  }
  /// Worker `w`'s successful CALL_REPLY to `relay`, sent under its lease of `shard`.
  void reply(connection& w, uint32_t shard, uint64_t relay) {
    caf::anon_send(dir, call_reply_request{from(w, 0, shard, epoch_of(w, shard)), relay, true,
                                           proto::bytes{'1'}});
    run();
  }
  void call(connection& client, uint64_t id, uint32_t shard, uint32_t park_ms = 0) {
    caf::anon_send(
        dir, call_request{from(client, id, shard), "start", "", proto::bytes{'{', '}'}, park_ms});
    run();
  }
};

std::vector<uint32_t> shards_of(const std::vector<proto::grant_entry>& grants) {
  std::vector<uint32_t> out;
  for (auto& g : grants)
    out.push_back(g.shard.value());
  return out;
}

uint64_t epoch_of(const connection& c, uint32_t shard) {
  for (auto& l : c.all<proto::lease>())
    for (auto& g : l.grants)
      if (g.shard.value() == shard) return g.epoch.value();
  for (auto& l : c.all<proto::grant>())
    for (auto& g : l.grants)
      if (g.shard.value() == shard) return g.epoch.value();
  return 0;
}

}  // namespace

TEST_CASE("a worker's LEASE holds every free shard up to max_shards, sent once the grants are "
          "durable") {
  fixture f;
  auto& a = f.worker(3);
  CHECK(f.log.grants() == 3);
  CHECK(a.frames.empty());  // the grants are still in the log
  f.commit(7);
  auto lease = a.last<proto::lease>();
  CHECK(lease.id == 1);
  CHECK(lease.shard_count == 4);
  CHECK(lease.ping_interval_ms == 1000);
  CHECK(lease.timeout_ms == 5000);
  CHECK(shards_of(lease.grants) == std::vector<uint32_t>{0, 1, 2});
  for (auto& g : lease.grants) {
    CHECK(g.epoch.value() == 1);
    CHECK(g.durable_lsn.value() == 7);
  }
}

TEST_CASE("only the first grant of a burst is asked of the log at once, and one made at once is "
          "answered like the others") {
  fixture f;
  auto& a = f.worker(3);
  CHECK(f.log.asked_at_once == std::vector<uint32_t>{0});  // declined: all three through the queue
  CHECK(f.log.grants() == 3);
  f.commit();
  CHECK(shards_of(a.last<proto::lease>().grants) == std::vector<uint32_t>{0, 1, 2});
  f.log.make_at_once = true;
  auto& b = f.worker();  // the one free shard, made at once: not asked of the queue as well
  CHECK(f.log.asked_at_once == std::vector<uint32_t>{0, 3});
  CHECK(f.log.grants() == 4);
  CHECK(std::count(f.events.begin(), f.events.end(), "grant 3") == 0);
  f.commit();
  CHECK(shards_of(b.last<proto::lease>().grants) == std::vector<uint32_t>{3});
}

TEST_CASE("no call reaches a worker before the LEASE that names its shard, even when the grants "
          "take two log batches") {
  fixture f{2};
  auto& a = f.worker();
  auto& client = f.connect();
  f.call(client, 7, 0);  // parked: nobody holds shard 0 yet
  f.commit(0, 1);        // shard 0's grant is durable, shard 1's is not yet
  f.call(client, 8, 0);
  CHECK(a.frames.empty());
  f.commit();
  REQUIRE(a.frames.size() == 3);
  CHECK(std::holds_alternative<proto::lease>(a.frames[0]));
  CHECK(std::holds_alternative<proto::relayed_call>(a.frames[1]));
  CHECK(std::holds_alternative<proto::relayed_call>(a.frames[2]));
}

TEST_CASE("a worker whose grants fail in the log still gets its LEASE, without them") {
  fixture f{2};
  auto& a = f.worker();
  f.commit(0, 1);                     // shard 0 granted
  f.commit(0, SIZE_MAX, "injected");  // shard 1's grant could not be written
  auto lease = a.last<proto::lease>();
  CHECK(shards_of(lease.grants) == std::vector<uint32_t>{0});
}

TEST_CASE("a shard whose grant the log could not make stays busy: it is offered to nobody again, "
          "so a failed log and a standby never ask each other in a loop") {
  fixture f{2};
  auto& a = f.worker();
  f.commit();
  auto& b = f.worker();  // a standby for any number of shards
  f.end(a);
  f.commit();  // the revocations: both shards are offered to b
  REQUIRE(f.log.grants() == 4);
  f.commit(0, SIZE_MAX, "fdatasync: Input/output error");  // the log failed: neither was made
  CHECK(f.log.queued.empty());                             // not asked again
  CHECK(f.log.grants() == 4);
  CHECK(b.all<proto::grant>().empty());
  auto& c = f.worker();  // nor offered to a newcomer
  CHECK(f.log.queued.empty());
  CHECK(c.last<proto::lease>().grants.empty());
  auto stats = f.stats();
  CHECK(stats.number("shardsBlocked") == 2);
  CHECK(stats.number("heldShards") == 0);
}

TEST_CASE("a RELEASE whose revocation was in a batch the log could not write is answered ERR IO "
          "with the log's failure, and its shard stays busy") {
  fixture f{2};
  auto& a = f.worker();
  f.commit();
  auto& b = f.worker();
  caf::anon_send(f.dir, release_request{f.from(a, 10, 0, epoch_of(a, 0))});
  f.run();
  f.commit(0, SIZE_MAX, "fdatasync: Input/output error");
  CHECK(a.all<proto::ok>().empty());
  auto err = a.last<proto::err>();
  CHECK(err.id == 10);
  CHECK(err.code == uint16_t(proto::err_code::io));
  CHECK(err.message.find("fdatasync: Input/output error") != std::string::npos);
  CHECK(err.message.find("shard 0") != std::string::npos);
  CHECK(f.log.queued.empty());  // b is not offered the shard
  CHECK(b.all<proto::grant>().empty());
  auto stats = f.stats();
  CHECK(stats.number("revocationsInLog") == 0);
  CHECK(stats.number("shardsBlocked") == 1);
  CHECK(stats.number("leasesRevoked") == 0);
}

TEST_CASE("epochs continue from the ones the log recovered") {
  fixture f{2};
  // A fresh directory on a log whose shard 1 was last granted under epoch 9 before a restart:
  // a connection naming epoch 9 is told it is stale, not that it never held it.
  f.log.epochs[1] = 9;
  node_settings s;
  s.shards = 2;
  auto dir = spawn_directory(f.sys, s, &f.log);
  auto& c = f.connect();
  caf::anon_send(dir, release_request{f.from(c, 5, 1, 9)});
  f.run();
  auto err = c.last<proto::err>();
  CHECK(err.code == uint16_t(proto::err_code::stale_epoch));
  caf::anon_send_exit(dir, caf::exit_reason::user_shutdown);
}

TEST_CASE("standbys get freed shards in connection order, each within its max_shards") {
  fixture f;
  auto& a = f.worker();
  f.commit();
  REQUIRE(a.last<proto::lease>().grants.size() == 4);
  auto& b = f.worker(1);  // standby for one shard
  auto& c = f.worker();   // standby for any number
  CHECK(b.last<proto::lease>().grants.empty());
  CHECK(c.last<proto::lease>().grants.empty());
  f.end(a);
  CHECK(f.log.grants() == 4);  // nothing is offered before the revocations are through the log
  f.commit();                  // the revocations
  CHECK(f.log.grants() == 8);
  f.commit();  // the new grants
  auto gb = b.last<proto::grant>();
  auto gc = c.last<proto::grant>();
  CHECK(shards_of(gb.grants) == std::vector<uint32_t>{0});  // b came first, and takes one
  CHECK(shards_of(gc.grants) == std::vector<uint32_t>{1, 2, 3});
  for (auto& g : gc.grants)
    CHECK(g.epoch.value() == 2);  // strictly greater than a's
}

TEST_CASE("RELEASE answers OK once the revocation is through the log and the shard goes to a "
          "standby, never back to the releaser") {
  fixture f{2};
  auto& a = f.worker();
  f.commit();
  auto& b = f.worker();
  auto e0 = epoch_of(a, 0);
  // the wrong epoch is refused and nothing reaches the log
  caf::anon_send(f.dir, release_request{f.from(a, 9, 0, e0 + 1)});
  f.run();
  CHECK(a.last<proto::err>().code == uint16_t(proto::err_code::not_holder));
  CHECK(f.log.queued.empty());
  caf::anon_send(f.dir, release_request{f.from(a, 10, 0, e0)});
  f.run();
  REQUIRE(f.log.queued.size() == 1);
  CHECK_FALSE(f.log.queued[0].grant);
  CHECK(a.all<proto::ok>().empty());  // not before the log has it
  f.commit();
  CHECK(a.last<proto::ok>().id == 10);
  f.commit();
  CHECK(shards_of(b.last<proto::grant>().grants) == std::vector<uint32_t>{0});
  CHECK(a.all<proto::grant>().empty());
  // released again by b, with a the only one waiting: a never gets it back
  caf::anon_send(f.dir, release_request{f.from(b, 11, 0, epoch_of(b, 0))});
  f.run();
  f.commit();
  f.commit();
  CHECK(a.all<proto::grant>().empty());
  CHECK(f.log.grants() == 3);
}

TEST_CASE("after DRAIN no call is relayed to the worker, and its OK waits for the calls routed "
          "before it") {
  fixture f{2};
  auto& a = f.worker();
  f.commit();
  auto& client = f.connect();
  f.call(client, 100, 0);
  auto rc = a.last<proto::relayed_call>();
  f.drain(a, 20, {0});
  CHECK(a.all<proto::ok>().empty());  // the call routed before it is not answered yet
  f.call(client, 101, 0);
  CHECK(a.all<proto::relayed_call>().size() == 1);  // parked, not relayed
  f.reply(a, 0, rc.relay);
  CHECK(a.last<proto::ok>().id == 20);
  auto res = client.last<proto::call_result>();
  CHECK(res.id == 100);
  CHECK(res.status == uint8_t(proto::call_status::ok));
  // the parked call goes to the next holder
  auto& b = f.worker();
  f.end(a);
  f.commit();
  f.commit();
  CHECK(b.last<proto::relayed_call>().relay != rc.relay);
}

TEST_CASE("a DRAIN's OK waits for every call routed to the worker before it, on any shard, and "
          "for none routed after it") {
  fixture f{2};
  auto& a = f.worker();
  f.commit();
  auto& client = f.connect();
  f.call(client, 100, 1);  // on a shard the DRAIN will not name
  auto before = a.last<proto::relayed_call>();
  f.drain(a, 20, {0});
  CHECK(a.all<proto::ok>().empty());  // shard 1's call came before it
  f.call(client, 101, 1);             // shard 1 is not draining: relayed, but after the DRAIN
  REQUIRE(a.all<proto::relayed_call>().size() == 2);
  f.reply(a, 1, before.relay);
  CHECK(a.last<proto::ok>().id == 20);  // the later call is still in flight
}

TEST_CASE("a DRAIN waiting for a call is answered when the call's lease ends and the call is "
          "answered for the worker") {
  fixture f{2};
  auto& a = f.worker();
  f.commit();
  auto& client = f.connect();
  f.call(client, 100, 1);
  f.drain(a, 20, {0});
  CHECK(a.all<proto::ok>().empty());
  caf::anon_send(f.dir, release_request{f.from(a, 21, 1, epoch_of(a, 1))});  // shard 1 goes
  f.run();
  CHECK(client.last<proto::call_result>().status == uint8_t(proto::call_status::holder_lost));
  REQUIRE_FALSE(a.all<proto::ok>().empty());
  CHECK(a.all<proto::ok>().front().id == 20);  // the DRAIN's, before the RELEASE's own OK
}

TEST_CASE("fencing revokes in the log before the worker hears REVOKED, and keeps its "
          "connection") {
  fixture f{2};
  auto& a = f.worker();
  f.commit();
  f.events.clear();
  caf::anon_send(f.dir, fence_request{a.id});
  f.run();
  REQUIRE(f.events.size() == 3);
  CHECK(f.events[0] == "revoke 0");
  CHECK(f.events[1] == "revoke 1");
  CHECK(f.events[2] == "REVOKED to " + std::to_string(a.id));
  CHECK(f.log.revoke_calls == 1);                     // both leases given to the log at once
  CHECK(f.log.frames_pending_at_revoke.back() == 0);  // before REVOKED was even sent
  auto revoked = a.last<proto::revoked>();
  CHECK(revoked.shards.size() == 2);
  CHECK(revoked.reason == "the invocation ended");
  CHECK_FALSE(a.closed);
  // later requests under the fenced epoch are stale
  caf::anon_send(f.dir, release_request{f.from(a, 3, 0, epoch_of(a, 0))});
  f.run();
  CHECK(a.last<proto::err>().code == uint16_t(proto::err_code::stale_epoch));
}

TEST_CASE("a worker that leaves gives the log its leases' revocations at once, and each shard "
          "is offered again when the batch that holds them is through") {
  fixture f{3};
  auto& a = f.worker();
  f.commit();
  auto& b = f.worker();
  f.end(a);
  CHECK(f.log.revoke_calls == 1);
  CHECK(f.log.queued.size() == 3);
  CHECK(b.all<proto::grant>().empty());
  f.commit(0, 2);  // two of the three revocations are through: their shards go to b
  f.commit();      // their grants, and the third revocation
  f.commit();      // the third shard's grant
  std::vector<uint32_t> got;
  for (auto& g : b.all<proto::grant>())
    for (auto s : shards_of(g.grants))
      got.push_back(s);
  CHECK(got == std::vector<uint32_t>{0, 1, 2});
  CHECK(b.all<proto::grant>().size() == 2);
}

TEST_CASE("grants that arrive for a worker that left meanwhile are revoked in one call, "
          "unannounced") {
  fixture f{3};
  auto& a = f.worker();  // its three grants wait in the log
  f.end(a);
  CHECK(f.log.revoke_calls == 0);  // it held nothing yet
  f.commit();
  CHECK(f.log.revoke_calls == 1);
  CHECK(f.log.queued.size() == 3);
  CHECK(a.all<proto::lease>().empty());
}

TEST_CASE("a RELEASE whose revocation comes back in one batch with others is answered OK once, "
          "and no revocation is counted in the log after it") {
  fixture f{3};
  auto& a = f.worker();
  f.commit();
  caf::anon_send(f.dir, release_request{f.from(a, 10, 0, epoch_of(a, 0))});
  f.run();
  caf::anon_send(f.dir, fence_request{a.id});  // the other two, queued behind it
  f.run();
  CHECK(f.log.queued.size() == 3);
  CHECK(f.stats().number("revocationsInLog") == 3);
  CHECK(a.all<proto::ok>().empty());
  f.commit();  // all three in one revocations_done
  CHECK(a.all<proto::ok>().size() == 1);
  CHECK(a.last<proto::ok>().id == 10);
  CHECK(f.stats().number("revocationsInLog") == 0);
}

TEST_CASE("a silent worker gets REVOKED and is closed and the standby gets its shards") {
  fixture f{2};
  auto& a = f.worker();
  f.commit();
  auto& b = f.worker();
  f.end(a, true);
  CHECK(f.log.revoke_calls == 1);
  CHECK(f.log.frames_pending_at_revoke.back() == 0);  // the log has them before REVOKED is sent
  CHECK(a.closed);
  auto revoked = a.last<proto::revoked>();
  CHECK(revoked.shards.size() == 2);
  CHECK(revoked.reason.find("liveness") != std::string::npos);
  f.commit();
  f.commit();
  CHECK(shards_of(b.last<proto::grant>().grants) == std::vector<uint32_t>{0, 1});
}

TEST_CASE("a call with no holder parks and expires exactly after its park time, with status 2") {
  fixture f{4, 30000};
  auto& client = f.connect();
  f.call(client, 5, 2, 250);
  CHECK(client.frames.empty());
  f.sched.advance_time(249ms);
  f.run();
  CHECK(client.frames.empty());
  f.sched.advance_time(1ms);
  f.run();
  auto res = client.last<proto::call_result>();
  CHECK(res.id == 5);
  CHECK(res.status == uint8_t(proto::call_status::parked_too_long));
  // park_ms 0 means the server's own limit; a larger one is lowered to it
  f.call(client, 6, 2, 0);
  f.call(client, 7, 2, 90000);
  f.sched.advance_time(29999ms);
  f.run();
  CHECK(client.all<proto::call_result>().size() == 1);
  f.sched.advance_time(1ms);
  f.run();
  CHECK(client.all<proto::call_result>().size() == 3);
  // no such shard: status 4 at once
  f.call(client, 8, 4);
  CHECK(client.last<proto::call_result>().status == uint8_t(proto::call_status::bad_request));
}

TEST_CASE("calls in flight to a holder that goes away end with status 3") {
  fixture f{1};
  auto& a = f.worker();
  f.commit();
  auto& client = f.connect();
  f.call(client, 1, 0);
  f.call(client, 2, 0);
  CHECK(a.all<proto::relayed_call>().size() == 2);
  f.end(a);
  auto results = client.all<proto::call_result>();
  REQUIRE(results.size() == 2);
  for (auto& r : results)
    CHECK(r.status == uint8_t(proto::call_status::holder_lost));
}

namespace {

/// A directory with the invoker's parts stubbed: a binder that holds binds until answered, one
/// wake record per shard, an endpoint.
struct invoked_fixture : fixture {
  std::vector<shard_actor> records;
  std::vector<wake_log> wake;
  binder_log scheduler;
  endpoint_log ep;
  binder_stub_actor binder;
  invocation_actor endpoint;

  struct not_ready {};

  explicit invoked_fixture(uint32_t shards = 4, std::function<void(node_settings&)> tweak = {})
      : invoked_fixture(not_ready{}, shards, std::move(tweak)) {
    ready();
  }
  /// The invoker's parts, not yet ready: ready() says they are.
  invoked_fixture(not_ready, uint32_t shards = 4, std::function<void(node_settings&)> tweak = {})
      : fixture(shards, 30000, 60000, std::move(tweak)), wake(shards) {
    binder = sys.spawn(binder_stub, &scheduler);
    endpoint = sys.spawn(endpoint_stub, &ep);
    for (auto& w : wake)
      records.push_back(sys.spawn(wake_stub, &w));
  }
  /// The invoker is ready (invoker_ready): the scheduler hears its start.
  void ready() {
    auto registry = std::make_shared<wake_records>(
        records.size(), [this](uint32_t s, const resting_record&) { return records.at(s); });
    caf::anon_send(dir, invoker_ready{binder, registry});
    run();
    REQUIRE(scheduler.started());
  }
  ~invoked_fixture() {
    caf::anon_send_exit(binder, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
    for (auto& r : records)
      caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
    run();
  }
  connection& invoked(uint64_t invocation) {
    auto& c = connect();
    caf::anon_send(dir, hello_request{from(c, 1), 0, true, invocation});
    run();
    return c;
  }
  void answer(bind_result r) {
    caf::anon_send(binder, caf::ok_atom::value, std::move(r));
    run();
  }
  bind_result bound(std::vector<uint32_t> shards) {
    return bind_result{bind_code::bound, std::move(shards), 900, 0, endpoint};
  }  /// An invoked worker (invocation `invocation`) that holds `shards`, its grants through the
     /// log.
  connection& invoked_holding(uint64_t invocation, std::vector<uint32_t> shards) {
    auto& w = invoked(invocation);
    answer(bound(std::move(shards)));
    commit();
    return w;
  }
};

}  // namespace

TEST_CASE("a worker that leaves while its invocation's bind answer is on its way holds no lease") {
  invoked_fixture f;
  auto& a = f.invoked(77);
  f.end(a);  // BYE before the invoker answered
  f.answer(f.bound({0, 1}));
  CHECK(f.log.grants() == 0);
  CHECK(a.frames.empty());
  // and the shards are still free for the next worker
  auto& b = f.worker();
  f.commit();
  CHECK(b.last<proto::lease>().grants.size() == 4);
}

TEST_CASE("an invoked worker gets exactly its invocation's free shards, or ERR when the "
          "invocation is unknown or taken") {
  invoked_fixture f;
  auto& a = f.invoked_holding(77, {2, 1, 2});
  auto lease = a.last<proto::lease>();
  CHECK(shards_of(lease.grants) == std::vector<uint32_t>{1, 2});
  CHECK(lease.remaining_ms == 900);
  REQUIRE(f.ep.leased.size() == 1);  // the endpoint hears of it straight from the directory
  CHECK(f.ep.leased[0].invocation == 77);
  CHECK(f.ep.leased[0].shards == 2);
  CHECK(f.wake[1].leased == std::vector<int32_t>{0});  // the record learns its last endpoint
  auto& b = f.invoked(78);
  f.answer(bind_result{bind_code::unknown, {}, 0, -1, {}});
  CHECK(b.closed);
  CHECK(b.last<proto::err>().code == uint16_t(proto::err_code::unknown_invocation));
  auto& c = f.invoked(77);
  f.answer(bind_result{bind_code::taken, {}, 0, -1, {}});
  CHECK(c.closed);
  CHECK(c.last<proto::err>().code == uint16_t(proto::err_code::invocation_taken));
}

TEST_CASE("an invocation that ends while its grants are in the log leaves no lease: the LEASE "
          "is empty and every grant is revoked") {
  invoked_fixture f;
  auto& a = f.invoked(77);
  f.answer(f.bound({0, 1}));
  f.commit(0, 1);  // shard 0's grant is in, shard 1's not yet
  caf::anon_send(f.dir, fence_request{a.id});
  f.run();
  CHECK(a.frames.empty());  // nothing to revoke that the worker was told of
  f.commit();               // shard 1's grant arrives after the fence, and shard 0's revocation
  f.commit();               // shard 1's revocation
  REQUIRE(a.frames.size() == 1);
  CHECK(a.last<proto::lease>().grants.empty());
  CHECK(f.ep.leased.at(0).shards == 0);  // the endpoint counts it unleased
  size_t revokes = 0;
  for (auto& e : f.log.all)
    revokes += !e.grant;
  CHECK(revokes == 2);
  auto& b = f.worker();  // and the shards are free again
  f.commit();
  CHECK(b.last<proto::lease>().grants.size() == 4);
}

TEST_CASE("an invocation fenced for running out budget + grace after its lease tells each shard's "
          "record so, with whether the log saw anything written under the lease") {
  invoked_fixture f;
  auto& a = f.invoked_holding(77, {0, 1});
  f.unwritten = {0};
  caf::anon_send(f.dir, fence_request{a.id, true});
  f.run();
  f.commit();  // the revocations
  REQUIRE(f.wake[0].ended.size() == 1);
  REQUIRE(f.wake[1].ended.size() == 1);
  auto& e0 = f.wake[0].ended[0];
  auto& e1 = f.wake[1].ended[0];
  CHECK((e0.crashed && e0.invoked && e0.overran && !e0.wrote));
  CHECK((e1.crashed && e1.invoked && e1.overran && e1.wrote));
  // An invocation that ended otherwise (a 5xx, a crash) is no overrun.
  auto& b = f.invoked_holding(78, {2});
  caf::anon_send(f.dir, fence_request{b.id});
  f.run();
  f.commit();
  REQUIRE(f.wake[2].ended.size() == 1);
  CHECK(f.wake[2].ended[0].crashed);
  CHECK_FALSE(f.wake[2].ended[0].overran);
  // A call that expires parked for a shard that overran says why nobody took it.
  auto& client = f.connect();
  f.call(client, 5, 1, 100);
  f.call(client, 6, 2, 100);
  f.sched.advance_time(100ms);
  f.run();
  auto answers = client.all<proto::call_result>();
  REQUIRE(answers.size() == 2);
  auto text = [](const proto::call_result& r) { return std::string(r.body.begin(), r.body.end()); };
  CHECK_MESSAGE(text(answers[0])
                        .find("no holder took shard 1 while the call was parked (its last "
                              "invocation did not answer within budget + grace") !=
                    std::string::npos,
                text(answers[0]));
  CHECK_MESSAGE(text(answers[1]).find("budget") == std::string::npos, text(answers[1]));
}

TEST_CASE("once the log failed, the invoker is told to stop, once, with the failure (no invoked "
          "worker could lease a shard until restart)") {
  invoked_fixture f{2};
  auto& a = f.worker();
  f.commit();
  CHECK(f.scheduler.halts.empty());
  caf::anon_send(f.dir, release_request{f.from(a, 10, 0, epoch_of(a, 0))});
  f.run();
  f.commit(0, SIZE_MAX, "fdatasync: Input/output error");
  REQUIRE(f.scheduler.halts.size() == 1);
  CHECK(f.scheduler.halts[0] == "the log failed (fdatasync: Input/output error)");
  f.end(a);  // shard 1's revocation is reported with the failure too
  f.commit(0, SIZE_MAX, "fdatasync: Input/output error");
  auto& b = f.worker();  // a grant the broken log cannot make
  f.commit(0, SIZE_MAX, "the log failed earlier");
  CHECK(b.last<proto::lease>().grants.empty());
  caf::anon_send(f.dir, log_failed{"told twice"});
  f.run();
  CHECK(f.scheduler.halts.size() == 1);
}

TEST_CASE("once the log failed, calls parked for shards without a holder are answered at once, "
          "as are new ones, with status 2 naming the failure, and a held shard's still go to its "
          "holder") {
  fixture f{2, 30000};
  auto& a = f.worker();
  f.commit();
  caf::anon_send(f.dir, release_request{f.from(a, 10, 1, epoch_of(a, 1))});
  f.run();
  f.commit();  // shard 1 has no holder now; shard 0 is a's
  auto& client = f.connect();
  f.call(client, 5, 1, 20000);
  CHECK(client.frames.empty());  // parked
  f.worker();                    // its grant fails with the log
  f.commit(0, SIZE_MAX, "fdatasync: Input/output error");
  auto parked = client.last<proto::call_result>();
  CHECK(parked.id == 5);
  CHECK(parked.status == uint8_t(proto::call_status::parked_too_long));
  auto text = std::string(parked.body.begin(), parked.body.end());
  CHECK(text == proto::json_error("shard 1 has no holder and the log failed (fdatasync: "
                                  "Input/output error): no lease can be granted until the node "
                                  "restarts; the call did not run"));
  f.call(client, 6, 1, 20000);  // a new one: not parked either
  CHECK(client.last<proto::call_result>().id == 6);
  CHECK(client.all<proto::call_result>().size() == 2);
  f.call(client, 7, 0, 20000);  // shard 0 is still a's
  CHECK(a.all<proto::relayed_call>().size() == 1);
  CHECK(client.all<proto::call_result>().size() == 2);
}

TEST_CASE("once the log failed, a call for a shard whose grant is still in the log waits for it, "
          "and is relayed when the grant was made") {
  fixture f{2, 30000};
  auto& a = f.worker();
  f.commit();
  caf::anon_send(f.dir, release_request{f.from(a, 10, 1, epoch_of(a, 1))});
  f.run();
  f.commit();
  auto& client = f.connect();
  f.call(client, 5, 1, 20000);
  auto& b = f.worker();  // shard 1's grant to b is in the log
  caf::anon_send(f.dir, log_failed{"write: No space left on device"});
  f.run();
  f.call(client, 6, 1, 20000);
  CHECK(client.frames.empty());  // neither is answered: the grant may still make a holder
  f.commit();                    // it was made (its batch was written before the failure)
  CHECK(b.all<proto::relayed_call>().size() == 2);
  CHECK(client.all<proto::call_result>().empty());
}

TEST_CASE("an invoker that starts after the log failed is stopped as it starts") {
  fixture g{2};
  g.worker();
  g.commit(0, SIZE_MAX, "injected");
  binder_log later;
  auto binder = g.sys.spawn(binder_stub, &later);
  auto registry = std::make_shared<wake_records>(2, [&](uint32_t, const resting_record&) {
    return shard_actor{};  // (no record is told anything here)
  });
  caf::anon_send(g.dir, invoker_ready{binder, registry});
  g.run();
  CHECK(later.halts == std::vector<std::string>{"the log failed (injected)"});
  CHECK(later.heard == std::vector<std::string>{"halt", "put"});  // nothing dispatched meanwhile
  caf::anon_send_exit(binder, caf::exit_reason::user_shutdown);
  g.run();
}

TEST_CASE("an invoked worker's IDLE report reaches its wake record and its endpoint when the "
          "lease ends") {
  invoked_fixture f;
  auto& a = f.invoked_holding(77, {1});
  shard_report r;
  r.shard = 1;
  r.epoch = epoch_of(a, 1);
  r.end.due_in_ms = 100;
  r.end.steps = 5;
  r.end.open_us = 1234;
  // its frame was read 5 ms before the directory had the report (a long one, decoded meanwhile)
  auto read = clock_ns(f.sched.clock().now() - std::chrono::milliseconds(5));
  caf::anon_send(f.dir, idle_request{f.from(a, 30), {r}, read});
  f.run();
  CHECK(a.last<proto::ok>().id == 30);
  f.sched.advance_time(std::chrono::milliseconds(40));  // the lease ends later than the report
  caf::anon_send(f.dir, fence_request{a.id});
  f.run();
  f.commit();
  REQUIRE(f.wake[1].ended.size() == 1);
  auto& end = f.wake[1].ended[0];
  CHECK_FALSE(end.crashed);
  CHECK(end.invoked);
  CHECK(end.due_in_ms == 100);
  CHECK(end.reported_at == read);  // the timer counts from the report
  CHECK(end.steps == 5);
  REQUIRE(f.ep.reports.size() == 1);
  CHECK(f.ep.reports[0].steps == 5);
  CHECK(f.ep.reports[0].open_us == 1234);
  // a lease that ends without a report is a crash, and the endpoint hears nothing
  auto& b = f.invoked_holding(79, {1});
  f.end(b);
  // not before the log has made the revocation: the shard is busy until then, and an
  // invocation it made due could lease nothing
  CHECK(f.wake[1].ended.size() == 1);
  f.commit();
  REQUIRE(f.wake[1].ended.size() == 2);
  CHECK(f.wake[1].ended[1].crashed);
  CHECK(f.ep.reports.size() == 1);
}

TEST_CASE("shards a worker took before the invoker was ready are named to the scheduler with its "
          "start, and their records hear they are held") {
  invoked_fixture f{invoked_fixture::not_ready{}};  // 4 shards
  auto& a = f.worker();
  f.commit();
  REQUIRE(a.last<proto::lease>().grants.size() == 4);
  caf::anon_send(f.dir, release_request{f.from(a, 9, 1, epoch_of(a, 1))});
  caf::anon_send(f.dir, release_request{f.from(a, 10, 3, epoch_of(a, 3))});
  f.run();
  f.commit();
  f.ready();
  CHECK(f.scheduler.held_at_start == std::vector<uint32_t>{0, 2});
  CHECK(f.wake[0].leased == std::vector<int32_t>{-1});
  CHECK(f.wake[1].leased.empty());
}

TEST_CASE("shards whose grant is in the log when the invoker becomes ready are named to the "
          "scheduler with its start, and their records hear they are held once") {
  invoked_fixture f{invoked_fixture::not_ready{}};
  auto& a = f.worker();  // grants for 0-3 in the log
  REQUIRE(f.log.queued.size() == 4);
  f.ready();
  CHECK(f.scheduler.held_at_start == std::vector<uint32_t>{0, 1, 2, 3});
  CHECK(f.wake[0].leased == std::vector<int32_t>{-1});
  f.commit();  // the grants are made
  CHECK(a.last<proto::lease>().grants.size() == 4);
  CHECK(f.wake[0].leased == std::vector<int32_t>{-1, -1});  // told again, the same
  CHECK(f.wake[0].ended.empty());
}

TEST_CASE(
    "a grant named at the invoker's start that then ends at once, its worker gone, leaves its "
    "record told the lease ended") {
  invoked_fixture f{invoked_fixture::not_ready{}};
  auto& a = f.worker();  // grants for 0-3 in the log
  f.ready();
  f.end(a);    // the worker leaves before its grants are made
  f.commit();  // they arrive and end at once, unannounced
  f.commit();  // their revocations are made: each record hears its lease ended
  CHECK(f.wake[0].leased == std::vector<int32_t>{-1});
  REQUIRE(f.wake[0].ended.size() == 1);
  CHECK(f.wake[0].ended[0].crashed);
  CHECK_FALSE(f.wake[0].ended[0].invoked);
}

TEST_CASE("a grant named at the invoker's start that the log then fails leaves its record told the "
          "lease ended, not its holder's fault") {
  invoked_fixture f{invoked_fixture::not_ready{}};
  f.worker();  // grants for 0-3 in the log
  f.ready();
  f.commit(0, SIZE_MAX, "disk gone");
  REQUIRE(f.wake[0].ended.size() == 1);
  CHECK(f.wake[0].ended[0].crashed);
  CHECK_FALSE(f.wake[0].ended[0].holders_fault);
}

TEST_CASE("a call parked for a shard nobody holds makes its wake record due, with the start's "
          "type") {
  invoked_fixture f;
  auto& client = f.connect();
  caf::anon_send(f.dir, call_request{f.from(client, 1, 3), "start", "billing", {}, 0});
  f.run();
  CHECK(f.wake[3].due == std::vector<uint8_t>{proto::reason_call});
  CHECK(f.wake[3].start_types == std::vector<std::string>{"billing"});
}

TEST_CASE("when the last call parked for an unheld shard expires its wake record hears that no "
          "call waits, and not before") {
  invoked_fixture f{4, [](node_settings& s) { s.park_ms = 1000; }};
  auto& client = f.connect();
  caf::anon_send(f.dir, call_request{f.from(client, 1, 3), "start", "billing", {}, 300});
  caf::anon_send(f.dir, call_request{f.from(client, 2, 3), "signal", "", {}, 600});
  f.run();
  CHECK(f.wake[3].due.size() == 2);
  f.sched.advance_time(300ms);
  f.run();
  CHECK(f.wake[3].undue.empty());  // one call still waits
  f.sched.advance_time(300ms);
  f.run();
  CHECK(client.all<proto::call_result>().size() == 2);
  CHECK(f.wake[3].undue == std::vector<uint8_t>{proto::reason_call});
  CHECK(f.wake[2].undue.empty());
}

TEST_CASE("a call for a shard whose revocation is in the log makes its record due only once the "
          "log has made it, after the lease's end") {
  invoked_fixture f;
  auto& b = f.invoked_holding(79, {1});
  f.end(b);  // the revocation is in the log: shard 1 is busy
  auto& client = f.connect();
  caf::anon_send(f.dir, call_request{f.from(client, 1, 1), "signal", "", {}, 0});
  caf::anon_send(f.dir, call_request{f.from(client, 2, 1), "start", "billing", {}, 0});
  caf::anon_send(f.dir, call_request{f.from(client, 3, 1), "start", "billing", {}, 0});
  f.run();
  CHECK(f.wake[1].ended.empty());
  CHECK(f.wake[1].due.empty());
  f.commit();
  REQUIRE(f.wake[1].ended.size() == 1);
  CHECK(f.wake[1].ended[0].crashed);
  // every start type that waits, once each, not only the first call's (a signal's: none)
  CHECK(f.wake[1].due == std::vector<uint8_t>{proto::reason_call, proto::reason_call});
  CHECK(f.wake[1].start_types == std::vector<std::string>{"", "billing"});
}

namespace {

/// A wake record that rests when the test says: it keeps the directory's retire request until it
/// gets a lease_end whose `steps` are `answer_now` (a promise is delivered on its actor's thread).
constexpr uint64_t answer_now = 0xFEED;

struct resting_log {
  wake_log got;
  int asked = 0;
  resting_record rest;  ///< the answer
  caf::typed_response_promise<resting_record> pending;
};

shard_actor::behavior_type resting_stub(shard_actor::pointer self, resting_log* log) {
  return {
      [=](due_atom, uint8_t reasons, const std::string&) { log->got.due.push_back(reasons); },
      [=](undue_atom, uint8_t reasons) { log->got.undue.push_back(reasons); },
      [=](leased_atom, int32_t endpoint) { log->got.leased.push_back(endpoint); },
      [=](const lease_end& e) {
        if (e.steps == answer_now) {
          log->pending.deliver(log->rest);
          if (log->rest.stored) self->quit();  // else it declined and goes on
          return;
        }
        log->got.ended.push_back(e);
      },
      [=](retire_atom) {
        log->asked++;
        log->pending = self->make_response_promise<resting_record>();
        return log->pending;
      },
      [=](stats_atom) {
        return actor_stats{"shard", 0};
      },
  };
}

}  // namespace

/// A directory whose wake records are made by `spawn` (the test sets it: it sees what each one
/// spawns from), quiet after two periods of 1 s, and a client that calls shard 3.
struct resting_node {
  fixture f{4, 30000, 2000};
  binder_log scheduler;
  binder_stub_actor binder = f.sys.spawn(binder_stub, &scheduler);
  std::function<shard_actor(const resting_record&)> spawn;
  std::shared_ptr<wake_records> registry = std::make_shared<wake_records>(
      4, [this](uint32_t, const resting_record& rest) { return spawn(rest); });
  connection* client = nullptr;

  resting_node() {
    caf::anon_send(f.dir, invoker_ready{binder, registry});
    f.run();
    client = &f.connect();
  }
  ~resting_node() {
    caf::anon_send_exit(binder, caf::exit_reason::user_shutdown);
    registry->shut_down();
    f.run();
  }
  /// A CALL for shard 3, which nobody holds: its record is told it is due.
  void call(uint64_t id) {
    caf::anon_send(f.dir, call_request{f.from(*client, id, 3), "start", "", {}, 0});
    f.run();
  }
  /// Lets up to three periods pass until `log`'s record is asked to rest.
  void until_asked(const resting_log& log) {
    for (int i = 0; i < 3 && log.asked == 0; ++i) {
      f.sched.advance_time(1s);
      f.run();
    }
  }
  /// `record` (a resting_stub) answers the directory's retire request now, with its log's rest.
  void answer(shard_actor record) {
    lease_end now;
    now.steps = answer_now;
    caf::anon_send(record, now);
    f.run();
  }
};

TEST_CASE(
    "a quiet wake record is asked to rest, and what it is told meanwhile goes to its next actor, "
    "spawned from its rest") {
  resting_log first, second;
  std::vector<resting_record> spawned_from;
  resting_node n;
  n.spawn = [&](const resting_record& rest) {
    spawned_from.push_back(rest);
    return n.f.sys.spawn(resting_stub, spawned_from.size() == 1 ? &first : &second);
  };
  n.call(1);  // nobody holds shard 3: its record is told, and spawned for it
  REQUIRE(spawned_from.size() == 1);
  CHECK_FALSE(spawned_from[0].stored);  // from its initial state
  CHECK(first.got.due.size() == 1);
  n.until_asked(first);
  REQUIRE(first.asked == 1);  // quiet for two periods
  n.call(2);                  // told while it is asked: held
  CHECK(first.got.due.size() == 1);
  first.rest.stored = true;
  first.rest.failures = 7;
  first.rest.last_endpoint = 0;
  n.answer(n.registry->find(3));
  REQUIRE(spawned_from.size() == 2);  // the held message spawned its next actor, from the rest
  CHECK(spawned_from[1].stored);
  CHECK(spawned_from[1].failures == 7);
  CHECK(second.got.due.size() == 1);
  CHECK(first.got.due.size() == 1);
  CHECK(n.registry->actors() == 1);
}

namespace {

/// A wake record that counts the directory's retire requests and never answers them.
struct retire_asks {
  int asked = 0;
  std::vector<caf::typed_response_promise<resting_record>> kept;
};

shard_actor::behavior_type unanswering_stub(shard_actor::pointer self, retire_asks* log) {
  return {
      [=](due_atom, uint8_t, const std::string&) {},
      [=](undue_atom, uint8_t) {},
      [=](leased_atom, int32_t) {},
      [=](const lease_end&) {},
      [=](retire_atom) {
        log->asked++;
        log->kept.push_back(self->make_response_promise<resting_record>());
        return log->kept.back();
      },
      [=](stats_atom) {
        return actor_stats{"shard", 0};
      },
  };
}

}  // namespace

TEST_CASE("quiet wake records are asked to rest 200 at a time, the next 200 20 ms after a full "
          "slice") {
  fixture f{450, 30000, 2000};  // periods of 1 s
  binder_log scheduler;
  auto binder = f.sys.spawn(binder_stub, &scheduler);
  retire_asks asks;
  auto registry = std::make_shared<wake_records>(
      450, [&](uint32_t, const resting_record&) { return f.sys.spawn(unanswering_stub, &asks); });
  caf::anon_send(f.dir, invoker_ready{binder, registry});
  f.run();
  for (uint32_t s = 0; s < 450; ++s)
    REQUIRE(registry->get(s));  // every record an actor, used in this period
  for (int i = 0; i < 4 && asks.asked == 0; ++i) {
    f.sched.advance_time(1s);
    f.run();
  }
  CHECK(asks.asked == 200);  // the first slice
  f.sched.advance_time(19ms);
  f.run();
  CHECK(asks.asked == 200);
  f.sched.advance_time(1ms);
  f.run();
  CHECK(asks.asked == 400);  // 20 ms after a full slice
  f.sched.advance_time(20ms);
  f.run();
  CHECK(asks.asked == 450);  // the rest
  // After a slice that was not full, the next look is a second later, not 20 ms.
  auto& clock = f.sched.clock();
  CHECK(clock.schedule().count(clock.now() + 20ms) == 0);
  CHECK(clock.schedule().count(clock.now() + 1s) >= 1);
  caf::anon_send_exit(binder, caf::exit_reason::user_shutdown);
  registry->shut_down();
  f.run();
}

TEST_CASE(
    "a wake record that declines to rest keeps its actor and gets what it was told meanwhile") {
  resting_log first;
  int spawns = 0;
  resting_node n;
  n.spawn = [&](const resting_record&) {
    spawns++;
    return n.f.sys.spawn(resting_stub, &first);
  };
  n.call(1);
  n.until_asked(first);
  REQUIRE(first.asked == 1);
  auto actor = n.registry->find(3);
  n.call(2);  // held while it is asked
  CHECK(first.got.due.size() == 1);
  n.answer(actor);  // it declines (nothing stored)
  CHECK(spawns == 1);
  CHECK(n.registry->find(3) == actor);  // the same actor
  CHECK(first.got.due.size() == 2);     // and the held call reached it
}

namespace {

/// Shards `first`-`last` withheld because another node's map gives them elsewhere (`conflict`),
/// or because the node is starting.
withheld_shards withholding_of(uint32_t first, uint32_t last, bool conflict = true) {
  return withheld_shards{{withheld{{{first, last}}, "node c serves a different map", conflict}}};
}

/// Node a of a two-node cluster: a serves shards 0-1, b 2-3.
void node_a_of_two(node_settings& s) {
  s.clustered = true;
  s.cluster_node = "a";
  s.cluster.nodes = {proto::cluster_node{"a", "127.0.0.1:1", "127.0.0.1:2", "", {{0, 1}}},
                     proto::cluster_node{"b", "127.0.0.1:3", "127.0.0.1:4", "", {{2, 3}}}};
}

}  // namespace

TEST_CASE("a withheld shard's lease ends in the log before REVOKED gives the reason, a call for "
          "it fails at once, and once given back it is granted again") {
  fixture f;
  auto& a = f.worker();
  f.commit();
  REQUIRE(a.last<proto::lease>().grants.size() == 4);
  auto e1 = epoch_of(a, 1);
  f.events.clear();
  caf::anon_send(f.dir, withholding_of(1, 2));
  f.run();
  CHECK(f.events == journal{"revoke 1", "revoke 2", "REVOKED to 1"});
  auto r = a.last<proto::revoked>();
  CHECK(r.reason == "node c serves a different map");
  REQUIRE(r.shards.size() == 2);
  CHECK(r.shards[0].shard.value() == 1);
  CHECK(r.shards[0].epoch.value() == e1);
  CHECK(r.shards[1].shard.value() == 2);
  f.commit();  // the revocations: nobody is offered 1 or 2
  CHECK(f.log.grants() == 4);
  auto& b = f.worker();
  CHECK(b.last<proto::lease>().grants.empty());
  auto& client = f.connect();
  f.call(client, 5, 2);
  auto res = client.last<proto::call_result>();
  CHECK(res.status == uint8_t(proto::call_status::parked_too_long));
  CHECK(std::string(res.body.begin(), res.body.end()) ==
        R"({"error":"shard 2 is withheld: node c serves a different map; the call did not run"})");
  f.call(client, 6, 3);  // still held by a: relayed, not refused
  CHECK(client.all<proto::call_result>().size() == 1);
  CHECK(a.last<proto::relayed_call>().shard.value() == 3);
  caf::anon_send(f.dir, withheld_shards{});  // given back: to a, the first waiting worker
  f.run();
  CHECK(f.log.grants() == 6);
  f.commit();
  auto g = a.last<proto::grant>();
  CHECK(shards_of(g.grants) == std::vector<uint32_t>{1, 2});
  CHECK(g.grants[0].epoch.value() == e1 + 1);
  CHECK(b.all<proto::grant>().empty());
}

TEST_CASE("calls and messages a withholding drops for an unheld shard leave its wake record due "
          "for neither") {
  invoked_fixture f;
  auto& client = f.connect();
  caf::anon_send(f.dir, call_request{f.from(client, 1, 1), "signal", "", {}, 0});
  caf::anon_send(f.dir, remote_message{1, 9, 1, 7, proto::bytes{'x'}});
  f.run();
  CHECK(f.wake[1].due.size() == 2);
  caf::anon_send(f.dir, withholding_of(1, 1));
  f.run();
  CHECK(client.last<proto::call_result>().status == uint8_t(proto::call_status::parked_too_long));
  CHECK(f.wake[1].undue == std::vector<uint8_t>{proto::reason_call, proto::reason_message});
}

TEST_CASE("a holder whose shards are withheld for two reasons hears each reason with its shards") {
  fixture f;
  auto& a = f.worker();
  f.commit();
  caf::anon_send(f.dir, withheld_shards{{withheld{{{1, 1}}, "node c's map", true},
                                         withheld{{{2, 3}}, "node d's map", true}}});
  f.run();
  auto told = a.all<proto::revoked>();
  REQUIRE(told.size() == 2);
  std::map<std::string, std::vector<uint32_t>> by_reason;
  for (auto& r : told)
    for (auto& e : r.shards)
      by_reason[r.reason].push_back(e.shard.value());
  CHECK(by_reason["node c's map"] == std::vector<uint32_t>{1});
  CHECK(by_reason["node d's map"] == std::vector<uint32_t>{2, 3});
}

TEST_CASE("a grant that is in the log when its shard is withheld ends unannounced as it arrives, "
          "and the worker's LEASE leaves it out") {
  fixture f;
  auto& a = f.worker();  // grants for 0-3 in the log
  caf::anon_send(f.dir, withholding_of(0, 0));
  f.run();
  f.commit();  // the grants arrive: 0's ends at once
  CHECK(shards_of(a.last<proto::lease>().grants) == std::vector<uint32_t>{1, 2, 3});
  CHECK(a.all<proto::revoked>().empty());
  REQUIRE(f.log.queued.size() == 1);
  CHECK_FALSE(f.log.queued[0].grant);
  CHECK(f.log.queued[0].shard == 0);
}

TEST_CASE("a node of a cluster leases nothing until it has heard its peers: the LEASE is empty and "
          "a call parks, and both are served once the hold ends") {
  fixture f{4, 30000, 60000, node_a_of_two};
  CHECK(f.stats().number("withheldShards", -1) == 2);  // a's two, not b's
  auto& a = f.worker();
  CHECK(a.last<proto::lease>().grants.empty());
  CHECK(f.log.grants() == 0);
  auto& client = f.connect();
  f.call(client, 5, 1);  // parks: the hold is short, not a conflict
  CHECK(client.frames.empty());
  caf::anon_send(f.dir, withheld_shards{});  // the cluster actor heard every peer
  f.run();
  f.commit();
  CHECK(shards_of(a.last<proto::grant>().grants) == std::vector<uint32_t>{0, 1});  // not b's
  CHECK(f.stats().number("withheldShards", -1) == 0);
  CHECK(a.last<proto::relayed_call>().shard.value() == 1);
}

TEST_CASE("the scheduler hears what is withheld before it may dispatch, and every change after") {
  invoked_fixture f{4, node_a_of_two};
  REQUIRE(f.scheduler.withheld.size() == 1);
  CHECK(f.scheduler.heard == std::vector<std::string>{"withheld", "put"});
  auto& hold = f.scheduler.withheld[0].parts;
  REQUIRE(hold.size() == 1);
  CHECK(hold[0].ranges == std::vector<proto::shard_range>{{0, 1}});
  CHECK_FALSE(hold[0].conflict);
  CHECK(hold[0].why == "node a has not yet heard from every node of its cluster since it started");
  caf::anon_send(f.dir, withholding_of(1, 1));
  f.run();
  REQUIRE(f.scheduler.withheld.size() == 2);
  CHECK(f.scheduler.withheld[1] == withholding_of(1, 1));
  // an invoked worker is granted nothing withheld, even when its invocation names it
  caf::anon_send(f.dir, withheld_shards{});
  f.run();
  caf::anon_send(f.dir, withholding_of(1, 1));
  f.run();
  auto& w = f.invoked_holding(77, {0, 1});
  CHECK(shards_of(w.last<proto::lease>().grants) == std::vector<uint32_t>{0});
}

TEST_CASE("a shard withheld between its grant and its worker's LEASE leaves the LEASE, with no "
          "REVOKED") {
  fixture f;
  auto& a = f.worker();
  f.commit(0, 1);  // shard 0's grant is made; the LEASE waits for the other three
  caf::anon_send(f.dir, withholding_of(0, 0));
  f.run();
  f.commit();
  CHECK(shards_of(a.last<proto::lease>().grants) == std::vector<uint32_t>{1, 2, 3});
  CHECK(a.all<proto::revoked>().empty());
  CHECK(f.log.all.back().shard == 0);  // its lease ended in the log
  CHECK_FALSE(f.log.all.back().grant);
}

TEST_CASE("when a conflict of maps withholds a shard, calls parked for it fail and messages parked "
          "for it are dropped, while a hold at start keeps them") {
  fixture f;
  auto& client = f.connect();
  f.call(client, 5, 1);
  caf::anon_send(f.dir, remote_message{1, 9, 1, 7, proto::bytes{'x'}});
  f.run();
  CHECK(f.stats().number("parkedMessages") == 1);
  caf::anon_send(f.dir, withholding_of(1, 1, false));  // a hold, not a conflict: they stay
  f.run();
  CHECK(client.frames.empty());
  CHECK(f.stats().number("parkedMessages") == 1);
  caf::anon_send(f.dir, withholding_of(1, 1));
  f.run();
  auto res = client.last<proto::call_result>();
  CHECK(res.id == 5);
  CHECK(res.status == uint8_t(proto::call_status::parked_too_long));
  CHECK(std::string(res.body.begin(), res.body.end()).find("shard 1 is withheld") !=
        std::string::npos);
  CHECK(f.stats().number("parkedMessages") == 0);
  CHECK(f.stats().number("parkedRefused") == 2);                         // the call and the message
  caf::anon_send(f.dir, remote_message{1, 9, 1, 8, proto::bytes{'y'}});  // dropped: resent later
  f.run();
  CHECK(f.stats().number("parkedMessages") == 0);
}

TEST_CASE("an invoked worker's lease ended by a withholding is no crash of the worker's") {
  invoked_fixture f;
  auto& a = f.invoked_holding(77, {1});
  REQUIRE(shards_of(a.last<proto::lease>().grants) == std::vector<uint32_t>{1});
  caf::anon_send(f.dir, withholding_of(1, 1));
  f.run();
  CHECK(a.last<proto::revoked>().reason == "node c serves a different map");
  f.commit();  // the revocation: the record hears how the lease ended
  REQUIRE(f.wake[1].ended.size() == 1);
  CHECK(f.wake[1].ended[0].crashed);              // due again, for recovery,
  CHECK_FALSE(f.wake[1].ended[0].holders_fault);  // but not backed off as an invocation's crash
  CHECK(f.wake[1].ended[0].invoked);  // (still invoked: its types route as an invoked holder's)
  // a grant that arrives withheld ends the same way
  auto& b = f.invoked(78);
  caf::anon_send(f.dir, withheld_shards{});
  f.run();
  f.commit();  // (nothing queued but what the give-back offers: no long-lived worker)
  f.answer(f.bound({2}));
  caf::anon_send(f.dir, withholding_of(2, 2));  // while its grant is in the log
  f.run();
  f.commit();  // the grant arrives and ends at once
  CHECK(shards_of(b.last<proto::lease>().grants).empty());
  f.commit();  // its revocation: the record hears how it ended
  REQUIRE(f.wake[2].ended.size() == 1);
  CHECK_FALSE(f.wake[2].ended[0].holders_fault);
}

TEST_CASE(
    "an invoked worker's IDLE report reaches its endpoint when a withholding ends the lease") {
  invoked_fixture f;
  auto& a = f.invoked_holding(77, {1});
  shard_report r;
  r.shard = 1;
  r.epoch = epoch_of(a, 1);
  r.end.steps = 3;
  caf::anon_send(f.dir, idle_request{f.from(a, 30), {r}, 0});
  f.run();
  caf::anon_send(f.dir, withholding_of(1, 1));
  f.run();
  f.commit();
  REQUIRE(f.ep.reports.size() == 1);
  CHECK(f.ep.reports[0].steps == 3);
  REQUIRE(f.wake[1].ended.size() == 1);
  CHECK_FALSE(f.wake[1].ended[0].crashed);  // it reported: its report decides
}

TEST_CASE(
    "once the log failed, a shard left without a holder shows blocked to operators, one still "
    "held shows held") {
  fixture f{2};
  auto& a = f.worker();
  f.commit();
  CHECK(state_of(f.view(0, 0).at(0), nullptr) == shard_state::held);
  caf::anon_send(f.dir, release_request{f.from(a, 10, 0, epoch_of(a, 0))});
  f.run();
  f.commit(0, SIZE_MAX, "fdatasync: Input/output error");
  auto v = f.view(0, 1);
  REQUIRE(v.size() == 2);
  CHECK(v[0].blocked);
  CHECK(state_of(v[0], nullptr) == shard_state::blocked);
  CHECK(state_name(state_of(v[0], nullptr)) == "blocked");
  CHECK_FALSE(v[1].blocked);
  CHECK(state_of(v[1], nullptr) == shard_state::held);
  auto m = f.marks(0, 1);  // the byte per shard says the same
  REQUIRE(m.size() == 2);
  CHECK(state_of(static_cast<uint8_t>(m[0]), -1) == shard_state::blocked);
  CHECK(state_of(static_cast<uint8_t>(m[1]), -1) == shard_state::held);
}
