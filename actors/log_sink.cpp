#include "actors/log_sink.hpp"

#include "actors/net/out_lane.hpp"

namespace fusee::server {

void log_sink::set_directory(directory_actor d) {
  std::lock_guard<std::mutex> lk{mtx_};
  directory_ = std::move(d);
}

directory_actor log_sink::directory() {
  std::lock_guard<std::mutex> lk{mtx_};
  return directory_;
}

void log_sink::add_session(session_id s, session_actor a, std::shared_ptr<out_lane> lane) {
  std::lock_guard<std::mutex> lk{mtx_};
  sessions_[s] = target{std::move(a), std::move(lane)};
}

void log_sink::remove_session(session_id s) {
  std::lock_guard<std::mutex> lk{mtx_};
  sessions_.erase(s);
}

std::vector<std::pair<session_id, session_actor>> log_sink::sessions() {
  std::lock_guard<std::mutex> lk{mtx_};
  std::vector<std::pair<session_id, session_actor>> out;
  out.reserve(sessions_.size());
  for (auto& [id, t] : sessions_)
    out.emplace_back(id, t.actor);
  return out;
}

void log_sink::send_frame(session_id s, const proto::any_message& m) {
  target t;
  {
    std::lock_guard<std::mutex> lk{mtx_};
    auto i = sessions_.find(s);
    if (i == sessions_.end()) return;  // the connection is gone; its lease ended with it
    t = i->second;
  }
  // Straight to the socket from this (the committing) thread when nothing waits; otherwise behind
  // what waits, in order. A peer that stopped reading is ended by its session.
  if (t.lane->send(proto::encode(m)) == out_lane::outcome::over_limit)
    caf::anon_send(t.actor, overflow_atom::value);
}

void log_sink::on_durable(session_id s, std::vector<proto::position> positions) {
  send_frame(s, proto::durable{0, std::move(positions)});
}

void log_sink::on_refused(session_id s, uint64_t request_id, proto::error e) {
  send_frame(s, proto::make_err(request_id, e));
}

void log_sink::on_answer(session_id s, proto::any_message answer) {
  send_frame(s, answer);
}

void log_sink::on_io_failed(session_id s, shard_id shard, epoch_t epoch, std::string message) {
  send_frame(s, proto::io_failed{0, shard, epoch, std::move(message)});
}

void log_sink::on_failed(std::string failure) {
  caf::anon_send(directory(), log_failed{std::move(failure)});
}

void log_sink::on_granted(std::vector<grant_done> grants) {
  caf::anon_send(directory(), grants_made{std::move(grants)});
}

void log_sink::on_revoked(std::vector<revocation_done> revoked, std::string failure) {
  caf::anon_send(directory(), revocations_done{std::move(revoked), std::move(failure)});
}

}  // namespace fusee::server
