#include "load/client_lane.hpp"

#include <sys/socket.h>

#include "client/address.hpp"
#include "load/load_workflow.hpp"
#include "protocol/shard_hash.hpp"

namespace fusee::load {

namespace {
using worker::json;
/// Request ids: start i is i + 2, its signal signal_base + i.
constexpr uint64_t signal_base = uint64_t{1} << 40;
constexpr auto resend_pause = std::chrono::milliseconds(100);

/// Answers a client sends its call again on: "holder lost: it may have run" (in doubt) and
/// "not run" (no holder took the shard in time, or the node that serves it cannot be reached).
bool retry(uint8_t status) {
  return status == static_cast<uint8_t>(proto::call_status::holder_lost) ||
         status == static_cast<uint8_t>(proto::call_status::parked_too_long);
}
}  // namespace

client_lane::client_lane(observations* obs, const scenario& s, uint32_t lane, uint64_t starts)
    : obs_(obs), s_(s), lane_(lane), starts_(starts) {}

std::string client_lane::connect(const std::string& server, uint32_t* shards) {
  server_ = server;
  auto at = client::parse_host_port(server);
  if (!at) return "server address " + server + " is not host:port";
  auto c = client::connection::open(at->host, at->port, s_.security);
  if (!c) return c.err().message;
  auto conn = std::make_shared<client::connection>(std::move(*c));
  auto n =
      client::client_hello(*conn, "load-client-" + std::to_string(lane_), std::chrono::seconds(10));
  if (!n) return "CLIENT_HELLO: " + n.err().message;
  *shards = *n;
  shards_ = *n;
  std::lock_guard<std::mutex> lk{mtx_};
  conn_ = std::move(conn);
  return {};
}

void client_lane::start() {
  receiver_ = std::thread([this] { receive_loop(); });
  sender_ = std::thread([this] { send_loop(); });
}

void client_lane::stop() {
  {
    std::lock_guard lk{flight_mtx_};  // so a closed-loop sender cannot miss the wake-up
    stop_ = true;
  }
  flight_cv_.notify_all();
  {
    std::lock_guard<std::mutex> lk{mtx_};
    if (conn_ && conn_->fd() >= 0) ::shutdown(conn_->fd(), SHUT_RDWR);  // unblocks both
  }
  if (sender_.joinable()) sender_.join();
  if (receiver_.joinable()) receiver_.join();
}

bool client_lane::send_start(uint64_t i) {
  json input{{"steps", s_.steps}, {"step_us", s_.step_us}, {"sleep_ms", s_.sleep_ms}};
  if (s_.wake_at_s > 0) {
    // One instant for every run: t0 + wake_at_s on the system clock.
    auto since = std::chrono::nanoseconds(static_cast<int64_t>(s_.wake_at_s * 1e9)) -
                 (clock_type::now() - obs_->t0());
    auto at = std::chrono::system_clock::now() +
              std::chrono::duration_cast<std::chrono::system_clock::duration>(since);
    input["wake_at_ms"] =
        std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
  }
  if (s_.signals) input["signal"] = true;
  auto id = run_id(i);
  json args{{"id", id}, {"type", "load"}, {"input", input}};
  auto text = args.dump();
  std::lock_guard<std::mutex> lk{mtx_};  // one writer at a time, whole frames
  return conn_ && conn_->send(proto::call{
                      proto::request_head{i + 2, proto::shard_for(id, shards_), proto::epoch_t{0}},
                      "start", "load", proto::bytes(text.begin(), text.end()), 0});
}

bool client_lane::send_signal(uint64_t i) {
  auto id = run_id(i);
  // The key makes a resend of a signal the run took a duplicate, not a second "go".
  auto text = json{{"id", id}, {"name", "go"}, {"payload", nullptr}, {"key", "go"}}.dump();
  std::lock_guard<std::mutex> lk{mtx_};
  return conn_ &&
         conn_->send(proto::call{
             proto::request_head{signal_base + i, proto::shard_for(id, shards_), proto::epoch_t{0}},
             "signal", "", proto::bytes(text.begin(), text.end()), 0});
}

void client_lane::send_loop() {
  bool closed = s_.mode == "closed";
  auto end = obs_->t0() + std::chrono::nanoseconds(static_cast<int64_t>(s_.duration_s * 1e9));
  std::this_thread::sleep_until(obs_->t0());  // the schedule's start (pacing, not synchronising)
  for (uint64_t i = lane_; i < starts_ && !stop_; i += s_.connections) {
    std::chrono::nanoseconds at;
    if (closed) {
      std::unique_lock lk{flight_mtx_};
      // Closed loop: the next start leaves when one of this lane's is answered.
      flight_cv_.wait_until(lk, end, [&] { return stop_ || in_flight_ < s_.in_flight; });
      if (stop_ || clock_type::now() >= end) break;
      in_flight_++;
      at = std::chrono::nanoseconds(std::max<int64_t>(0, obs_->since_t0(clock_type::now())));
    } else {
      at = std::chrono::nanoseconds(static_cast<int64_t>(double(i) * 1e9 / s_.rate));
      std::this_thread::sleep_until(obs_->t0() + at);  // pacing the schedule, not synchronising
    }
    obs_->intended[i] = at.count();
    obs_->sent++;
    // A cold wake is timed from when the start actually left, not from its schedule.
    obs_->start_sent(proto::shard_for(run_id(i), shards_).value(), i,
                     std::max<int64_t>(0, obs_->since_t0(clock_type::now())));
    send_start(i);  // a failed send is resent after the reconnect, like an unanswered one
  }
  sender_done_ = true;
}

bool client_lane::reconnect() {
  while (!stop_) {
    uint32_t shards = 0;
    auto err = connect(server_, &shards);
    {
      std::lock_guard lk{down_mtx_};
      down_reason_ = err.empty() ? "" : server_ + ": " + err;
    }
    if (err.empty()) {
      reconnects_++;
      resends_.clear();  // every call not answered is sent below
      for (uint64_t i = lane_; i < starts_; i += s_.connections) {
        if (obs_->intended[i] >= 0 && obs_->answered[i] == 0) {
          resent(i) |= 1;
          send_start(i);
        }
        if (obs_->signal_sent[i] >= 0 && obs_->signal_answered[i] == 0) {
          resent(i) |= 2;
          send_signal(i);
        }
      }
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // retry pacing
  }
  return false;
}

void client_lane::answered() {
  if (s_.mode == "closed") {
    {
      std::lock_guard lk{flight_mtx_};
      in_flight_--;
    }
    flight_cv_.notify_one();
  }
}

void client_lane::resend(uint8_t status, uint64_t i, bool signal) {
  if (status == static_cast<uint8_t>(proto::call_status::holder_lost)) {
    signal ? send_signal(i) : send_start(i);  // the next holder, if any, parks it
    return;
  }
  resends_.push_back({clock_type::now() + resend_pause, i, signal});
}

void client_lane::resend_due() {
  for (auto now = clock_type::now(); !resends_.empty() && resends_.front().at <= now;) {
    auto r = resends_.front();
    resends_.pop_front();
    if (r.signal)
      send_signal(r.i);
    else
      send_start(r.i);
  }
}

void client_lane::receive_loop() {
  resent_.assign(starts_ / s_.connections + 1, 0);
  while (!stop_) {
    resend_due();
    std::shared_ptr<client::connection> conn;
    {
      std::lock_guard<std::mutex> lk{mtx_};
      conn = conn_;
    }
    auto r = conn->receive(resends_.empty() ? std::chrono::milliseconds(100) : resend_pause / 4);
    if (!r) {
      if (conn->timed_out()) continue;
      if (stop_ || !reconnect()) return;
      continue;
    }
    uint64_t rid = 0;
    if (auto* e = std::get_if<proto::err>(&*r)) rid = e->id;
    if (auto* res = std::get_if<proto::call_result>(&*r)) rid = res->id;
    auto late_ns = [&](int64_t since) {
      return static_cast<uint64_t>(std::max<int64_t>(0, obs_->since_t0(clock_type::now()) - since));
    };
    if (rid >= signal_base && rid - signal_base < starts_) {  // a signal's answer
      uint64_t i = rid - signal_base;
      if (obs_->signal_answered[i] != 0) continue;
      auto* res = std::get_if<proto::call_result>(&*r);
      if (res && retry(res->status)) {
        // In doubt or not taken: sent again, with the same key: a run that took the first one
        // answers the resend as a duplicate (below).
        (res->status == static_cast<uint8_t>(proto::call_status::holder_lost)
             ? obs_->signals_resent_in_doubt
             : obs_->signals_resent_parked)++;
        resent(i) |= 2;
        resend(res->status, i, true);
        continue;
      }
      bool ok = res && res->status == static_cast<uint8_t>(proto::call_status::ok);
      if (res && (resent(i) & 2) != 0) {
        auto body = json::parse(res->body.begin(), res->body.end(), nullptr, false);
        if (ok && body.is_object() && body.value("duplicate", false)) obs_->signals_duplicate++;
        // A runtime that keeps no keys: a resent signal whose run has finished was taken the
        // first time (the run could not end without it), so it was delivered.
        if (!ok) ok = body.is_object() && body.value("code", "") == "finished";
      }
      obs_->signal_answered[i] = ok ? 1 : 2;
      (ok ? obs_->signals_ok : obs_->signals_refused)++;
      std::lock_guard<std::mutex> lk{obs_->mtx};
      if (ok)
        obs_->signal_latency.record(late_ns(obs_->signal_sent[i]));
      else
        obs_->refusals["signal: " + (res ? std::string(res->body.begin(), res->body.end())
                                         : std::get<proto::err>(*r).message)]++;
      continue;
    }
    if (rid < 2 || rid - 2 >= starts_) continue;
    uint64_t i = rid - 2;
    if (obs_->answered[i] != 0) continue;  // a resent start's second answer
    if (auto* e = std::get_if<proto::err>(&*r)) {
      obs_->answered[i] = 2;  // refused at the protocol level (ERR)
      obs_->refused++;
      answered();
      std::lock_guard<std::mutex> lk{obs_->mtx};
      obs_->refusals["ERR " + std::to_string(e->code) + ": " + e->message]++;
      continue;
    }
    auto* res = std::get_if<proto::call_result>(&*r);
    if (!res) continue;
    if (retry(res->status)) {
      // In doubt (its worker died with it) or not taken (no holder in time): a start is
      // idempotent by id, so it is sent again, as an application would.
      (res->status == static_cast<uint8_t>(proto::call_status::holder_lost)
           ? obs_->starts_resent_in_doubt
           : obs_->starts_resent_parked)++;
      resent(i) |= 1;
      resend(res->status, i, false);
      continue;
    }
    auto late = late_ns(obs_->intended[i]);
    auto body = json::parse(res->body.begin(), res->body.end(), nullptr, false);
    // "existing" is expected for a resent start whose first send was taken before the kill.
    bool existing = body.is_object() && body.value("existing", false) && (resent(i) & 1) == 0;
    answered();
    if (res->status == static_cast<uint8_t>(proto::call_status::ok) && !existing) {
      obs_->start_answered_ok(i);
      if (s_.signals) {
        obs_->signal_sent[i] = std::max<int64_t>(0, obs_->since_t0(clock_type::now()));
        obs_->signals_sent++;
        send_signal(i);
      }
      std::lock_guard<std::mutex> lk{obs_->mtx};
      obs_->start_latency.record(late);
      obs_->interval_start_latency.record(late);
      if (obs_->cold[i]) obs_->wake_total.record(late);
    } else {
      obs_->answered[i] = 2;
      obs_->refused++;
      std::lock_guard<std::mutex> lk{obs_->mtx};
      obs_->refusals[existing ? std::string("the run existed already (another run's id?)")
                              : "status " + std::to_string(res->status) + ": " +
                                    std::string(res->body.begin(), res->body.end())]++;
    }
  }
}

}  // namespace fusee::load
