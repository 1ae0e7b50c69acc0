#include "worker/runtime.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "client/address.hpp"
#include "client/connection.hpp"
#include "protocol/json_text.hpp"
#include "protocol/signature.hpp"

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

/// One connection and the shards it holds.
class session final : public runner_env {
public:
  session(const registry& types, const worker_options& options, const std::atomic<bool>& stop)
      : types_(types), options_(options), stop_(stop), rng_(std::random_device{}()) {}
  ~session() { stop_keep_alive(); }

  // -- runner_env ---------------------------------------------------------------------------
  uint64_t now_ms() override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  }
  uint64_t random() override { return rng_(); }
  void before_step() override { flush(); }
  uint64_t next_request_id() override { return next_id_++; }
  void log(const std::string& line) override {
    if (options_.log)
      options_.log(line);
    else
      std::fprintf(stderr, "%s: %s\n", options_.name.c_str(), line.c_str());
  }

  /// Connects and says HELLO; an error says why the server could not be reached or refused.
  proto::result<void> connect(uint32_t offers, proto::invocation_id invocation) {
    auto at = client::parse_host_port(options_.server);
    if (!at)
      return proto::error{proto::err_code::io,
                          "server address " + options_.server + " is not host:port"};
    auto c = client::connection::open(at->host, at->port);
    if (!c) return c.err();
    conn_ = std::move(*c);
    auto lease = client::hello(conn_, offers, options_.max_shards, options_.name, 10s, invocation,
                               types_.names());
    if (!lease) return lease.err();
    shard_count_ = lease->shard_count;
    ping_interval_ =
        std::chrono::milliseconds(lease->ping_interval_ms ? lease->ping_interval_ms : 1000);
    remaining_ms_ = lease->remaining_ms;
    last_sent_ = clock::now().time_since_epoch().count();
    keepalive_ = std::thread([this] { keep_alive(); });
    for (auto& g : lease->grants)
      take(g);
    flush();
    return {};
  }

  /// One turn: waits up to `wait` for frames, handles all that came, runs what is due, sends.
  /// False once the connection is gone.
  bool turn(std::chrono::milliseconds wait) {
    auto r = conn_.receive(wait);
    // At most max_frames per turn, so timers, replies and pings keep their turn under load.
    constexpr int max_frames = 256;
    for (int n = 0; r; ++n) {
      last_received_ = clock::now();
      handle(*r);
      if (n + 1 == max_frames) break;
      r = conn_.receive(0ms);
    }
    if (!r && !conn_.timed_out()) {
      lost_ = r.err().message;
      return false;
    }
    for (auto& [s, runner] : shards_)
      runner->tick();
    checkpoint_if(options_.runner.checkpoint_every);
    flush();  // (PINGs are the keep-alive thread's)
    return true;
  }

  /// How long the next turn may wait: until the next timer or `cap`.
  std::chrono::milliseconds next_wait(std::chrono::milliseconds cap) {
    uint64_t wake = next_wake();
    auto wait = cap;
    if (wake != never) {
      uint64_t now = now_ms();
      wait = std::min(wait, std::chrono::milliseconds(wake > now ? wake - now : 0));
    }
    return std::max(0ms, wait);
  }

  /// Sends DRAIN for every held shard and serves until its OK: calls routed before it are
  /// answered. Then answers waiting `result` calls and lets the disk catch up (bounded).
  bool drain(std::chrono::milliseconds limit) {
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

  /// Serves until every shard has nothing waiting for the disk.
  bool settle(std::chrono::milliseconds limit) {
    auto until = clock::now() + limit;
    flush();
    while (!all_quiet()) {
      if (clock::now() > until) return false;
      if (!turn(std::min<std::chrono::milliseconds>(20ms, next_wait(20ms)))) return false;
    }
    return true;
  }

  /// IDLE with each shard's report; waits for its OK.
  bool report_idle(bool expired, std::chrono::milliseconds limit) {
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
    uint64_t id = expect_ok(idle.head.id);
    send(idle);
    flush();
    return await_ok(id, limit);
  }

  /// Checkpoints the shards with at least `at_least` new records; the CHECKPOINT request ids,
  /// whose OKs await_oks() can wait for when `awaited`.
  std::vector<uint64_t> checkpoint_if(uint64_t at_least, bool awaited = false) {
    std::vector<uint64_t> ids;
    for (auto& [s, runner] : shards_)
      if (runner->started() && runner->records_since_checkpoint() >= at_least &&
          runner->records_since_checkpoint() > 0)
        if (uint64_t id = runner->checkpoint()) ids.push_back(awaited ? expect_ok(id) : id);
    return ids;
  }

  /// Waits for the OK of each of `ids` (checkpoints durable), at most `limit` in all.
  bool await_oks(const std::vector<uint64_t>& ids, std::chrono::milliseconds limit) {
    auto until = clock::now() + limit;
    for (auto id : ids)
      if (!await_ok(id,
                    std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now())))
        return false;
    return true;
  }

  bool all_quiet() const {
    for (auto& [s, runner] : shards_)
      if (!runner->quiet()) return false;
    return pending_.empty();
  }
  bool all_started() const {
    for (auto& [s, runner] : shards_)
      if (!runner->started()) return false;
    return true;
  }
  uint64_t next_wake() const {
    uint64_t at = never;
    for (auto& [s, runner] : shards_)
      at = std::min(at, runner->next_wake_ms());
    return at;
  }
  size_t held() const { return shards_.size(); }
  uint64_t steps() const {
    uint64_t n = 0;
    for (auto& [s, runner] : shards_)
      n += steps_of(s);
    return n;
  }
  /// Steps run on shard `s` under this lease (0 while it recovers).
  uint64_t steps_of(uint32_t s) const {
    auto at = steps_at_lease_.find(s);
    return at == steps_at_lease_.end() ? 0 : shards_.at(s)->steps() - at->second;
  }
  size_t running() const {
    size_t n = 0;
    for (auto& [s, runner] : shards_)
      n += runner->running();
    return n;
  }
  uint32_t remaining_ms() const { return remaining_ms_; }
  clock::time_point last_received() const { return last_received_; }
  const std::string& lost() const { return lost_; }
  void close() {
    stop_keep_alive();
    conn_.close();
  }
  uint64_t calls() const { return calls_; }

private:
  void take(const proto::grant_entry& g) {
    uint32_t s = g.shard.value();
    auto runner = std::make_unique<shard_runner>(g.shard, g.epoch, types_, *this, settings());
    recovering_[s] = recovery{clock::now(), g.durable_lsn.value(), 0};
    shards_[s] = std::move(runner);
    uint64_t id = next_id_++;
    pending_[id] = proto::shard_epoch{g.shard, g.epoch};
    send(proto::load_checkpoint{proto::request_head{id, g.shard, g.epoch}});
  }

  runner_settings settings() const {
    auto s = options_.runner;
    s.shard_count = shard_count_;
    return s;
  }

  void read_log(uint32_t s, uint64_t after) {
    auto& runner = *shards_.at(s);
    uint64_t id = next_id_++;
    pending_[id] = proto::shard_epoch{runner.shard(), runner.epoch()};
    send(proto::recover_log{proto::request_head{id, runner.shard(), runner.epoch()},
                            proto::lsn_t{after}, options_.recover_page_bytes});
  }

  void recovered(uint32_t s, uint64_t last) {
    auto& runner = *shards_.at(s);
    auto& rec = recovering_.at(s);
    open_us_[s] = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - rec.since).count());
    recovering_.erase(s);
    steps_at_lease_[s] = runner.steps();
    runner.start(last);
  }

  void drop(uint32_t s, const std::string& why, bool release) {
    auto it = shards_.find(s);
    if (it == shards_.end()) return;
    log("shard " + std::to_string(s) + ": " + why);
    if (release)
      send(proto::release{
          proto::request_head{next_id_++, it->second->shard(), it->second->epoch()}});
    shards_.erase(it);
    recovering_.erase(s);
    std::erase_if(pending_, [&](auto& p) { return p.second.shard.value() == s; });
  }

  shard_runner* held(proto::shard_id s, std::optional<proto::epoch_t> epoch = std::nullopt) {
    auto it = shards_.find(s.value());
    if (it == shards_.end()) return nullptr;
    if (epoch && it->second->epoch() != *epoch) return nullptr;
    return it->second.get();
  }

  void handle(proto::any_message& m) {
    std::visit([&](auto& x) { on(x); }, m);
  }

  template <class T>
  void on(T&) {}  // requests never come from the server (decode_response refuses them)

  void on(proto::durable& d) {
    for (auto& p : d.positions)
      if (auto* r = held(p.shard, p.epoch)) r->on_durable(p.lsn.value());
  }
  void on(proto::grant& g) {
    for (auto& e : g.grants)
      take(e);
  }
  /// The runner a recovery answer is for (nullptr: not ours, or the shard is gone meanwhile).
  shard_runner* recovering(uint64_t id, uint32_t& s) {
    auto p = pending_.find(id);
    if (p == pending_.end()) return nullptr;
    auto lease = p->second;
    pending_.erase(p);
    s = lease.shard.value();
    return held(lease.shard, lease.epoch);
  }

  void on(proto::checkpoint_data& c) {
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
  void on(proto::log_page& page) {
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
  void on(proto::relayed_call& c) {
    ++calls_;
    if (auto* r = held(c.shard)) r->on_call(c.relay, c.method, c.args);
  }
  void on(proto::message& m) {
    if (auto* r = held(m.target))
      r->on_message(m.from.value(), m.from_epoch.value(), m.outbox_id, m.payload);
  }
  void on(proto::ack& a) {
    if (auto* r = held(a.from, a.from_epoch)) r->on_ack(a.outbox_id);
  }
  void on(proto::revoked& r) {
    for (auto& se : r.shards)
      if (held(se.shard, se.epoch)) drop(se.shard.value(), "lease revoked: " + r.reason, false);
  }
  // A shard this worker cannot go on with is given back (RELEASE), so the server can route its
  // calls to another worker instead of to one that would ignore them.
  void on(proto::io_failed& f) {
    if (held(f.shard, f.epoch))
      drop(f.shard.value(), "the server could not write its log: " + f.message, true);
  }
  void on(proto::ok& o) {
    if (awaited_.erase(o.id)) oks_.push_back(o.id);
  }
  void on(proto::err& e) {
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

  bool await_ok(uint64_t id, std::chrono::milliseconds limit) {
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

  void send(const proto::any_message& m) { proto::append_frame(out_, m); }
  uint64_t expect_ok(uint64_t id) {
    awaited_.insert(id);
    return id;
  }

  /// APPENDs for every shard with records, then the frames that may leave; one write.
  void flush() {
    for (auto& [s, runner] : shards_) {
      if (runner->has_records()) {
        // One APPEND per 8 MiB of records, far below the frame limit.
        auto a = runner->take_append();
        uint64_t lsn = a.first_lsn.value();
        for (size_t i = 0; i < a.records.size();) {
          proto::append part{
              proto::request_head{tagged(a.head.shard, a.head.epoch), a.head.shard, a.head.epoch},
              proto::lsn_t{lsn},
              {}};
          size_t bytes = 0;
          while (i < a.records.size() &&
                 (part.records.empty() || bytes + a.records[i].size() <= (8u << 20))) {
            bytes += a.records[i].size();
            part.records.push_back(std::move(a.records[i++]));
          }
          lsn += part.records.size();
          send(part);
        }
      }
      auto& ready = runner->ready_frames();
      for (auto& f : ready) {
        std::visit(
            [&](auto& x) {
              using T = std::decay_t<decltype(x)>;
              if constexpr (std::is_same_v<T, proto::call_reply> ||
                            std::is_same_v<T, proto::relay> ||
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

  clock::duration since_sent() const {
    return clock::now() - clock::time_point(clock::duration(last_sent_));
  }

  /// Pings whenever the connection has been quiet for half the ping interval, whatever the loop
  /// is doing (a long step body, a large recovery or snapshot), so the leases outlive them.
  void keep_alive() {
    auto interval = std::max<std::chrono::milliseconds>(ping_interval_, 4ms);
    std::unique_lock lock(ka_mu_);
    while (!ka_stop_) {
      ka_cv_.wait_for(lock, interval / 4);
      if (ka_stop_ || since_sent() < interval / 2) continue;
      proto::bytes ping;
      proto::append_frame(
          ping, proto::ping{proto::request_head{next_id_++, proto::no_shard, proto::epoch_t{0}}});
      std::lock_guard w(write_mu_);
      conn_.send_raw(ping);
      last_sent_ = clock::now().time_since_epoch().count();
    }
  }

  void stop_keep_alive() {
    {
      std::lock_guard lock(ka_mu_);
      ka_stop_ = true;
    }
    ka_cv_.notify_all();
    if (keepalive_.joinable()) keepalive_.join();
  }

  struct recovery {
    clock::time_point since;
    uint64_t durable = 0;  // the grant's durable LSN
    uint64_t last = 0;     // the checkpoint's LSN
  };

  const registry& types_;
  const worker_options& options_;
  const std::atomic<bool>& stop_;
  std::mt19937_64 rng_;
  client::connection conn_;
  uint32_t shard_count_ = 1;
  std::chrono::milliseconds ping_interval_{1000};
  uint32_t remaining_ms_ = 0;
  std::atomic<uint64_t> next_id_{100};
  std::map<uint32_t, std::unique_ptr<shard_runner>> shards_;
  std::map<uint32_t, recovery> recovering_;
  std::map<uint32_t, uint64_t> steps_at_lease_, open_us_;
  std::map<uint64_t, proto::shard_epoch> pending_;  // recovery requests: id -> lease
  std::set<uint64_t> awaited_;                      // ids whose OK await_ok() will want
  std::vector<uint64_t> oks_;
  proto::bytes out_;
  std::atomic<clock::rep> last_sent_{0};  // steady clock ticks of the last write
  clock::time_point last_received_ = clock::now();
  std::mutex write_mu_;  // the socket's writes: the loop and the keep-alive thread
  std::mutex ka_mu_;
  std::condition_variable ka_cv_;
  bool ka_stop_ = false;
  std::thread keepalive_;
  std::string lost_;
  uint64_t calls_ = 0;
};

}  // namespace

verified_invocation verify_invocation(std::string_view signature_header, std::string_view body,
                                      const std::vector<std::string>& secrets,
                                      uint64_t tolerance_ms) {
  verified_invocation v;
  if (signature_header.empty()) {
    v.refusal = {401, proto::json_error("no fusee-signature header")};
    return v;
  }
  auto now = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
  if (auto bad = proto::verify(signature_header, body, secrets, now, tolerance_ms)) {
    v.refusal = {401, proto::json_error(bad->message)};
    return v;
  }
  auto req = proto::parse_invocation_request(body);
  if (!req) {
    v.refusal = {400, proto::json_error(req.err().message)};
    return v;
  }
  v.request = std::move(*req);
  return v;
}

invocation_outcome runtime::serve_post(std::string_view signature_header, std::string_view body,
                                       const std::vector<std::string>& secrets,
                                       uint64_t tolerance_ms) {
  auto v = verify_invocation(signature_header, body, secrets, tolerance_ms);
  if (!v.request) return v.refusal;
  return invoke(*v.request);
}

runtime::runtime(const registry& types, worker_options options)
    : types_(types), options_(std::move(options)) {}

runtime::~runtime() = default;

int runtime::run() {
  auto backoff = 100ms;
  while (!stop_) {
    session s(types_, options_, stop_);
    auto ok = s.connect(proto::offer_serve_calls, proto::invocation_id{});
    if (!ok) {
      // A refusal of the HELLO itself (version, offers) will not change by retrying.
      if (ok.err().code == proto::err_code::version ||
          ok.err().code == proto::err_code::bad_offer) {
        s.log("the server refused this worker: " + ok.err().to_string());
        return 2;
      }
      s.log("cannot serve: " + ok.err().message + "; retrying in " +
            std::to_string(backoff.count()) + " ms");
      for (auto until = clock::now() + backoff; clock::now() < until && !stop_;)
        std::this_thread::sleep_for(20ms);
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, 5s);
      continue;
    }
    auto connected = clock::now();
    s.log("connected to " + options_.server + ", holding " + std::to_string(s.held()) +
          " shard(s)");
    bool alive = true;
    while (alive && !stop_)
      alive = s.turn(s.next_wait(200ms));
    if (!alive) {
      s.log("connection lost (" + s.lost() + "); reconnecting");
      // A connection the server keeps closing (a frame it refuses) must not become a tight loop.
      auto served = clock::now() - connected;
      if (served < 1s) {
        for (auto until = clock::now() + backoff; clock::now() < until && !stop_;)
          std::this_thread::sleep_for(20ms);
        backoff = std::min<std::chrono::milliseconds>(backoff * 2, 5s);
      } else {
        backoff = 100ms;
      }
      continue;
    }
    // Stopping: no new calls, answer the routed ones, let the disk catch up, checkpoint.
    s.drain(5s);
    auto checkpoints = s.checkpoint_if(1, true);
    s.settle(5s);
    if (!s.await_oks(checkpoints, 5s)) s.log("stopping before every checkpoint was confirmed");
    s.close();
  }
  return 0;
}

invocation_outcome runtime::invoke(const proto::invocation_request& request) {
  auto opts = options_;
  opts.server = request.server;
  session s(types_, opts, stop_);
  auto id = proto::format_invocation_id(request.invocation);
  if (auto ok = s.connect(proto::offer_invoked | proto::offer_serve_calls, request.invocation);
      !ok) {
    s.log("invocation " + id + ": " + ok.err().to_string());
    return {503, proto::json_error("the server could not be reached or refused the invocation: " +
                                   ok.err().to_string())};
  }
  auto start = clock::now();
  auto budget = std::chrono::milliseconds(s.remaining_ms());
  auto margin = std::clamp<std::chrono::milliseconds>(budget / 10, 200ms, 2000ms);
  auto leave_at = start + budget - margin;
  bool expired = false;
  // Run until every shard is recovered, quiet for quiet_ms, and nothing is due within linger.
  for (;;) {
    auto now = clock::now();
    if (now >= leave_at) {
      expired = true;
      break;
    }
    if (stop_) break;  // the program is stopping: leave as if idle
    if (s.all_started() && s.all_quiet() &&
        now - s.last_received() >= std::chrono::milliseconds(opts.quiet_ms)) {
      uint64_t wake = s.next_wake();
      if (wake == never || wake > s.now_ms() + opts.linger_ms) break;
    }
    auto cap = std::chrono::duration_cast<std::chrono::milliseconds>(leave_at - now);
    if (!s.turn(s.next_wait(std::min<std::chrono::milliseconds>(cap, 50ms)))) {
      s.log("invocation " + id + ": connection lost (" + s.lost() + ")");
      return {503, proto::json_error("connection to the server lost: " + s.lost())};
    }
  }
  // Leaving: DRAIN, a checkpoint if enough is new, the disk caught up, IDLE. A connection lost
  // on the way is the same failure as one lost before.
  bool drained = s.drain(3s);
  s.checkpoint_if(opts.checkpoint_at_leave);
  bool settled = drained && s.settle(3s);
  bool reported = settled && s.report_idle(expired, 3s);
  s.close();
  if (!s.lost().empty()) {
    s.log("invocation " + id + ": connection lost while leaving (" + s.lost() + ")");
    return {503, proto::json_error("connection to the server lost: " + s.lost())};
  }
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start);
  std::string body = "{\"invocation\":\"" + id + "\",\"shards\":" + std::to_string(s.held()) +
                     ",\"calls\":" + std::to_string(s.calls()) +
                     ",\"steps\":" + std::to_string(s.steps()) +
                     ",\"running\":" + std::to_string(s.running()) +
                     ",\"expired\":" + (expired ? "true" : "false") +
                     ",\"idle_reported\":" + (reported ? "true" : "false") +
                     ",\"ms\":" + std::to_string(took.count()) + "}";
  return {200, body};
}

}  // namespace fusee::worker
