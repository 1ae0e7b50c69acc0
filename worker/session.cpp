#include "worker/session.hpp"

#include <algorithm>
#include <cstdio>

#include "client/address.hpp"
#include "protocol/unix_time.hpp"

namespace fusee::worker {

namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;
constexpr uint64_t never = std::numeric_limits<uint64_t>::max();

/// Request ids of frames about one shard carry the shard and the low 30 bits of the lease's
/// epoch, so an ERR refusing an APPEND, a reply or a relay (which get no other answer) names the
/// lease it concerns, and a late one for an earlier lease of the shard is told apart.
constexpr uint64_t shard_tag = 1ull << 62;
constexpr uint64_t epoch_bits = 0x3FFFFFFFull;
uint64_t tagged(proto::shard_id s, proto::epoch_t e) {
  return shard_tag | ((e.value() & epoch_bits) << 32) | s.value();
}

}  // namespace

session::session(const registry& types, const worker_options& options, bool keep_alive_thread)
    : types_(types), options_(options), keep_alive_thread_(keep_alive_thread),
      rng_(std::random_device{}()), window_(options.max_appends_in_flight) {}

session::~session() {
  stop_keep_alive();
}

uint64_t session::now_ms() {
  return proto::unix_ms();
}

void session::log(const std::string& line) {
  if (options_.log)
    options_.log(line);
  else
    std::fprintf(stderr, "%s: %s\n", options_.name.c_str(), line.c_str());
}

proto::result<void> session::connect(uint32_t offers, proto::invocation_id invocation,
                                     const std::atomic<bool>* stop) {
  if (auto ok = begin_connect(offers, invocation); !ok) return ok;
  auto until = clock::now() + std::chrono::milliseconds(options_.hello_timeout_ms);
  for (;;) {
    auto left =
        std::max(0ms, std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()));
    // (After a first frame, first_answer() is receive() that still looks at `stop`.)
    auto r = client::first_answer(conn_, "HELLO", left, stop);
    if (!r) return r.err();
    if (!took_cluster_map(*r)) return take_answer(std::move(r));
  }
}

proto::result<void> session::take_answer(proto::result<proto::any_message> answer) {
  if (auto* e = answer ? std::get_if<proto::err>(&*answer) : nullptr)
    hello_refused_ = e->code == static_cast<uint16_t>(proto::err_code::unauthorized);
  return take_lease(client::lease_of(std::move(answer)));
}

bool session::took_cluster_map(proto::any_message& m) {
  auto* map = std::get_if<proto::cluster_map_frame>(&m);
  if (map == nullptr) return false;
  cluster_map_ = std::move(*map);
  return true;
}

proto::result<void> session::begin_connect(uint32_t offers, proto::invocation_id invocation) {
  auto at = client::parse_host_port(options_.server);
  if (!at)
    return proto::error{proto::err_code::io,
                        "server address " + options_.server + " is not host:port"};
  auto c = client::connection::open(at->host, at->port, options_.security,
                                    std::chrono::milliseconds(options_.hello_timeout_ms));
  if (!c) return c.err();
  conn_ = std::move(*c);
  hello_at_ = clock::now();
  if (!client::send_hello(conn_, offers, options_.max_shards, options_.name, invocation,
                          types_.names()))
    return proto::error{proto::err_code::io, "send failed"};
  return {};
}

std::optional<proto::result<void>> session::lease_answer() {
  auto r = conn_.receive(std::chrono::milliseconds(0));
  while (r && took_cluster_map(*r))
    r = conn_.receive(std::chrono::milliseconds(0));
  if (!r && conn_.timed_out()) return std::nullopt;  // not yet
  return take_answer(std::move(r));
}

proto::result<void> session::take_lease(proto::result<proto::lease> lease) {
  if (!lease) return lease.err();
  lease_wait_ = clock::now() - hello_at_;
  shard_count_ = lease->shard_count;
  ping_interval_ =
      std::chrono::milliseconds(lease->ping_interval_ms ? lease->ping_interval_ms : 1000);
  remaining_ms_ = lease->remaining_ms;
  last_sent_ = clock::now().time_since_epoch().count();
  if (keep_alive_thread_) keepalive_ = std::thread([this] { keep_alive(); });
  for (auto& g : lease->grants)
    take(g);
  flush();
  return {};
}

bool session::turn(std::chrono::milliseconds wait) {
  auto r = conn_.receive(wait);
  turn_began_ = clock::now();
  // At most max_frames per turn, so timers, replies and pings keep their turn under load.
  constexpr int max_frames = 256;
  more_ = false;
  for (int n = 0; r; ++n) {
    last_received_ = clock::now();
    handle(*r);
    if (n + 1 == max_frames) {
      more_ = true;  // frames may be waiting in the buffer, with nothing new on the socket
      break;
    }
    r = conn_.receive(0ms);
  }
  if (!r && !conn_.timed_out()) {
    lost_ = r.err().message;
    return false;
  }
  // From the shard after the one that went first last turn: a shard whose runs take the whole
  // turn (turn_over) does not keep the others' parked work and due timers waiting turn after turn.
  auto it = shards_.upper_bound(tick_from_);
  for (size_t n = 0, count = shards_.size(); n < count; ++n, ++it) {
    if (it == shards_.end()) it = shards_.begin();
    if (n == 0) tick_from_ = it->first;
    it->second->tick();
  }
  checkpoint_due();
  flush();  // (PINGs: the keep-alive thread's, or the owner's ping_if_quiet())
  return true;
}

std::chrono::milliseconds session::next_wait(std::chrono::milliseconds cap) {
  uint64_t wake = next_wake();
  auto wait = cap;
  if (wake != never) {
    uint64_t now = now_ms();
    wait = std::min(wait, std::chrono::milliseconds(wake > now ? wake - now : 0));
  }
  return std::max(0ms, wait);
}

bool session::drain(std::chrono::milliseconds limit) {
  // `result` calls waiting for a run are answered now: DRAIN's OK waits for every routed call.
  for (auto& [s, runner] : shards_)
    runner->leave();
  proto::drain d{proto::request_head{next_id_++, proto::no_shard, proto::epoch_t{0}}, {}};
  for (auto& [s, runner] : shards_)
    d.shards.push_back(runner->shard());
  uint64_t id = expect_ok(d.head.id);
  send(d);
  flush();
  if (!await_ok(id, limit)) return false;
  return settle(limit);
}

bool session::stop_serving(std::chrono::milliseconds limit) {
  drain(limit);
  auto checkpoints = checkpoint_if(1, true);
  settle(limit);
  return await_oks(checkpoints, limit);
}

bool session::settle(std::chrono::milliseconds limit) {
  auto until = clock::now() + limit;
  flush();
  while (!all_quiet()) {
    if (clock::now() > until) return false;
    if (!turn(std::min<std::chrono::milliseconds>(20ms, next_wait(20ms)))) return false;
  }
  return true;
}

size_t fit_idle_types(std::vector<proto::idle_entry>& entries) {
  // A frame of the node's is at least 1 MiB, and at least idle_bytes_per_shard for each shard
  // of an invocation; each entry takes at most 48 bytes before its types, each type its length
  // (a varint, at most 5 bytes) and its bytes.
  size_t n = entries.size();
  size_t room = std::max<size_t>(size_t{1} << 20, n * proto::idle_bytes_per_shard) - n * 48 - 64;
  size_t need = 0, left = 0;  // left: the types not kept
  for (auto& e : entries) {
    for (auto& t : e.types)
      need += t.size() + 5;
    left += e.types.size();
  }
  if (need <= room) return 0;  // the usual case: everything fits
  std::vector<size_t> active;  // the entries with a k-th type, round k
  for (size_t i = 0; i < n; ++i)
    if (!entries[i].types.empty()) active.push_back(i);
  // Round k keeps each shard's k-th type while there is room for it: O(types), however unevenly
  // they are spread.
  std::vector<std::vector<std::string>> kept(n);
  for (size_t k = 0; !active.empty() && room >= 6; ++k) {  // 6: the shortest type's cost
    std::erase_if(active, [&](size_t i) {
      auto& types = entries[i].types;
      if (types[k].size() + 5 <= room) {
        room -= types[k].size() + 5;
        kept[i].push_back(std::move(types[k]));
        --left;
      }
      return k + 1 >= types.size();
    });
  }
  for (size_t i = 0; i < n; ++i)
    entries[i].types = std::move(kept[i]);
  return left;
}

bool session::report_idle(bool expired, std::chrono::milliseconds limit) {
  proto::idle idle{proto::request_head{next_id_++, proto::no_shard, proto::epoch_t{0}}, {}};
  uint64_t now = now_ms();
  for (auto& [s, runner] : shards_) {
    proto::idle_entry e;
    e.shard = runner->shard();
    e.epoch = runner->epoch();
    uint64_t due = runner->next_due_ms();
    // BUSY: work is there now (a live wait due at once, or a shard not even recovered).
    uint64_t wake = runner->next_wake_ms();
    bool busy = !runner->started() || (wake != never && wake <= now + options_.linger_ms);
    if (!runner->started()) due = now;
    e.due_in_ms = due == never ? proto::nothing_due : (due > now ? due - now : 0);
    e.flags = (expired ? proto::idle_expired : 0) | (busy ? proto::idle_busy : 0);
    e.steps = steps_of(s);
    e.open_us = open_us_[s];
    e.types = runner->missing_types();
    idle.entries.push_back(std::move(e));
  }
  if (size_t left_out = fit_idle_types(idle.entries))
    log("IDLE: " + std::to_string(left_out) +
        " missing workflow types left out so that it fits one frame (the next invocation that "
        "meets their runs reports them)");
  uint64_t id = expect_ok(idle.head.id);
  send(idle);
  flush();
  return await_ok(id, limit);
}

std::vector<uint64_t> session::checkpoint_if(uint64_t at_least, bool awaited) {
  std::vector<uint64_t> ids;
  for (auto& [s, runner] : shards_)
    if (runner->started() && runner->records_since_checkpoint() >= at_least &&
        runner->records_since_checkpoint() > 0)
      if (uint64_t id = runner->checkpoint()) ids.push_back(awaited ? expect_ok(id) : id);
  return ids;
}

void session::checkpoint_due() {
  uint64_t now = now_ms();
  for (auto& [s, runner] : shards_)
    if (runner->checkpoint_due(now)) runner->checkpoint();
}

bool session::await_oks(const std::vector<uint64_t>& ids, std::chrono::milliseconds limit) {
  auto until = clock::now() + limit;
  for (auto id : ids)
    if (!await_ok(id, std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now())))
      return false;
  return true;
}

bool session::all_quiet() const {
  for (auto& [s, runner] : shards_)
    if (!runner->quiet()) return false;
  return pending_.empty();
}

bool session::all_started() const {
  for (auto& [s, runner] : shards_)
    if (!runner->started()) return false;
  return true;
}

uint64_t session::next_wake() const {
  uint64_t at = never;
  for (auto& [s, runner] : shards_)
    if (!runner->leaving()) at = std::min(at, runner->next_wake_ms());  // (its tick() waits)
  return at;
}

uint64_t session::steps() const {
  uint64_t n = 0;
  for (auto& [s, runner] : shards_)
    n += steps_of(s);
  return n;
}

uint64_t session::steps_of(uint32_t s) const {
  auto at = steps_at_lease_.find(s);
  return at == steps_at_lease_.end() ? 0 : shards_.at(s)->steps() - at->second;
}

size_t session::running() const {
  size_t n = 0;
  for (auto& [s, runner] : shards_)
    n += runner->running();
  return n;
}

void session::close() {
  stop_keep_alive();
  conn_.close();
}

void session::take(const proto::grant_entry& g) {
  uint32_t s = g.shard.value();
  auto runner = std::make_unique<shard_runner>(g.shard, g.epoch, types_, *this, settings());
  recovering_[s] = recovery{clock::now(), g.durable_lsn.value(), 0};
  window_.forget(s);  // (a grant over a held shard: PROTOCOL.md has none)
  shards_[s] = std::move(runner);
  uint64_t id = next_id_++;
  pending_[id] = proto::shard_epoch{g.shard, g.epoch};
  send(proto::load_checkpoint{proto::request_head{id, g.shard, g.epoch}});
}

runner_settings session::settings() const {
  auto s = options_.runner;
  s.shard_count = shard_count_;
  return s;
}

void session::read_log(uint32_t s, uint64_t after) {
  auto& runner = *shards_.at(s);
  uint64_t id = next_id_++;
  pending_[id] = proto::shard_epoch{runner.shard(), runner.epoch()};
  send(proto::recover_log{proto::request_head{id, runner.shard(), runner.epoch()},
                          proto::lsn_t{after}, options_.recover_page_bytes});
}

void session::recovered(uint32_t s, uint64_t last) {
  auto& runner = *shards_.at(s);
  auto& rec = recovering_.at(s);
  open_us_[s] = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - rec.since).count());
  recovering_.erase(s);
  steps_at_lease_[s] = runner.steps();
  runner.start(last);
}

void session::drop(uint32_t s, const std::string& why, bool release) {
  auto it = shards_.find(s);
  if (it == shards_.end()) return;
  log("shard " + std::to_string(s) + ": " + why);
  if (release) {
    uint64_t id = next_id_++;
    send(proto::release{proto::request_head{id, it->second->shard(), it->second->epoch()}});
    window_.releasing(s, id);
  } else {
    window_.forget(s);
  }
  shards_.erase(it);
  recovering_.erase(s);
  steps_at_lease_.erase(s);
  open_us_.erase(s);
  std::erase_if(pending_, [&](auto& p) { return p.second.shard.value() == s; });
}

shard_runner* session::held(proto::shard_id s, std::optional<proto::epoch_t> epoch) {
  auto it = shards_.find(s.value());
  if (it == shards_.end()) return nullptr;
  if (epoch && it->second->epoch() != *epoch) return nullptr;
  return it->second.get();
}

void session::handle(proto::any_message& m) {
  std::visit([&](auto& x) { on(x); }, m);
}

void session::on(proto::durable& d) {
  for (auto& p : d.positions)
    if (auto* r = held(p.shard, p.epoch)) {
      r->on_durable(p.lsn.value());
      window_.durable(p.shard.value(), p.lsn.value());
    }
}

void session::send_appends() {
  // Rounds of one APPEND (at most 8 MiB of records, far below the frame limit) per shard with
  // records, from the shard the last full window stopped at: no shard waits behind others that
  // keep appending.
  // Another round only while a shard has more than one APPEND's worth (most flushes: one pass).
  for (bool more = true; more;) {
    more = false;
    auto it = shards_.lower_bound(flush_from_);
    for (size_t n = 0; n < shards_.size(); ++n, ++it) {
      if (it == shards_.end()) it = shards_.begin();
      auto& [s, runner] = *it;
      if (!runner->has_records()) continue;
      if (window_.full()) {
        flush_from_ = s;
        return;
      }
      auto a = runner->take_append(8u << 20);
      a.head.id = tagged(a.head.shard, a.head.epoch);
      window_.sent(s, a.first_lsn.value() + a.records.size() - 1);
      send(std::move(a));
      more = more || runner->has_records();
    }
  }
}

void session::on(proto::grant& g) {
  for (auto& e : g.grants)
    take(e);
}

shard_runner* session::recovering(uint64_t id, uint32_t& s) {
  auto p = pending_.find(id);
  if (p == pending_.end()) return nullptr;
  auto lease = p->second;
  pending_.erase(p);
  s = lease.shard.value();
  return held(lease.shard, lease.epoch);
}

void session::on(proto::checkpoint_data& c) {
  uint32_t s = 0;
  auto* r = recovering(c.id, s);
  if (!r) return;
  if (auto ok = r->restore(c.lsn.value(), c.data); !ok)
    return drop(s, "cannot read its checkpoint: " + ok.err().message, true);
  recovering_.at(s).last = c.lsn.value();
  if (recovering_.at(s).durable > c.lsn.value())
    read_log(s, c.lsn.value());
  else
    recovered(s, c.lsn.value());
}

void session::on(proto::log_page& page) {
  uint32_t s = 0;
  auto* r = recovering(page.id, s);
  if (!r) return;
  uint64_t lsn = page.first_lsn.value();
  for (auto& rec : page.records) {
    if (auto ok = r->replay(lsn, rec); !ok)
      return drop(s, "cannot recover: " + ok.err().message, true);
    ++lsn;
  }
  uint64_t last = lsn - 1;
  if (page.more)
    read_log(s, last);
  else
    recovered(s, std::max(last, recovering_.at(s).last));
}

void session::on(proto::relayed_call& c) {
  ++calls_;
  if (auto* r = held(c.shard)) r->on_call(c.relay, c.method, c.args);
}

void session::on(proto::message& m) {
  if (auto* r = held(m.target))
    r->on_message(m.from.value(), m.from_epoch.value(), m.outbox_id, m.payload);
}

void session::on(proto::ack& a) {
  if (auto* r = held(a.from, a.from_epoch)) r->on_ack(a.outbox_id);
}

void session::on(proto::revoked& r) {
  for (auto& se : r.shards)
    if (held(se.shard, se.epoch)) drop(se.shard.value(), "lease revoked: " + r.reason, false);
}

void session::on(proto::io_failed& f) {
  if (held(f.shard, f.epoch))
    drop(f.shard.value(), std::string{server_log_failed} + f.message, true);
}

void session::on(proto::ok& o) {
  if (window_.answered(o.id)) return;
  if (awaited_.erase(o.id)) oks_.push_back(o.id);
}

void session::on(proto::err& e) {
  window_.answered(e.id);  // a RELEASE's slots are free either way (the shard is given up)
  auto p = pending_.find(e.id);
  if (p != pending_.end()) {
    auto lease = p->second;
    pending_.erase(p);
    if (held(lease.shard, lease.epoch))
      drop(lease.shard.value(), "recovery refused: " + e.message, true);
    return;
  }
  if ((e.id & shard_tag) && e.id != 0) {
    uint32_t s = static_cast<uint32_t>(e.id & 0xFFFFFFFFu);
    auto it = shards_.find(s);
    if (it == shards_.end() ||
        ((it->second->epoch().value() & epoch_bits) != ((e.id >> 32) & epoch_bits)))
      return;  // about a lease this worker no longer has
    return drop(s, "the server refused a request: " + e.message, true);
  }
  log("the server answered request " + std::to_string(e.id) + " with an error: " + e.message);
}

bool session::await_ok(uint64_t id, std::chrono::milliseconds limit) {
  auto until = clock::now() + limit;
  for (;;) {
    auto it = std::find(oks_.begin(), oks_.end(), id);
    if (it != oks_.end()) {
      oks_.erase(it);
      return true;
    }
    if (clock::now() > until) return false;
    if (!turn(std::min<std::chrono::milliseconds>(50ms, next_wait(50ms)))) return false;
  }
}

uint64_t session::expect_ok(uint64_t id) {
  awaited_.insert(id);
  return id;
}

void session::flush() {
  send_appends();
  for (auto& [s, runner] : shards_) {
    auto& ready = runner->ready_frames();
    for (auto& f : ready) {
      std::visit(
          [&](auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, proto::call_reply> || std::is_same_v<T, proto::relay> ||
                          std::is_same_v<T, proto::message_ack>)
              x.head.id = tagged(x.head.shard, x.head.epoch);
          },
          f);
      send(f);
    }
    ready.clear();
  }
  if (out_.empty()) return;
  std::lock_guard lock(write_mu_);
  if (!conn_.send_raw(out_)) lost_ = "send failed";
  out_.clear();
  last_sent_ = clock::now().time_since_epoch().count();
}

clock::duration session::since_sent() const {
  return clock::now() - clock::time_point(clock::duration(last_sent_));
}

void session::keep_alive() {
  auto interval = std::max<std::chrono::milliseconds>(ping_interval_, 4ms);
  std::unique_lock lock(ka_mu_);
  while (!ka_stop_) {
    ka_cv_.wait_for(lock, interval / 4);
    if (!ka_stop_) ping_if_quiet();
  }
}

void session::ping_if_quiet() {
  auto interval = std::max<std::chrono::milliseconds>(ping_interval_, 4ms);
  if (since_sent() < interval / 2) return;
  proto::bytes ping;
  proto::append_frame(
      ping, proto::ping{proto::request_head{next_id_++, proto::no_shard, proto::epoch_t{0}}});
  std::lock_guard w(write_mu_);
  conn_.send_raw(ping);
  last_sent_ = clock::now().time_since_epoch().count();
}

void session::stop_keep_alive() {
  {
    std::lock_guard lock(ka_mu_);
    ka_stop_ = true;
  }
  ka_cv_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
}

}  // namespace fusee::worker
