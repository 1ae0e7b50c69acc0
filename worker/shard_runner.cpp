#include "worker/shard_runner.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "protocol/shard_hash.hpp"
#include "protocol/workflow_name.hpp"

namespace fusee::worker {

namespace {
constexpr uint64_t never = std::numeric_limits<uint64_t>::max();

proto::bytes to_bytes(const std::string& s) {
  return proto::bytes(s.begin(), s.end());
}
/// JSON text; strings that are not UTF-8 (an exception's message, a step's bytes) are written
/// with U+FFFD instead of throwing.
std::string dump(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}
/// The largest JSON value a record may carry: a record is at most proto::max_record_size bytes,
/// and ids, names and numbers around the value need far less than 64 KiB.
constexpr size_t max_value_size = proto::max_record_size - (64u << 10);
/// {"error": message, "code": code}: the body of a refused call (CALL_REPLY ok = 0).
json call_error(const std::string& code, const std::string& message) {
  return json{{"error", message}, {"code", code}};
}
}  // namespace

// -- one run --------------------------------------------------------------------------------

struct shard_runner::run_state {
  explicit run_state(shard_runner* o) : owner(o), ctx(reinterpret_cast<workflow_run*>(this)) {}
  shard_runner* owner;
  context ctx;

  // Durable state (rebuilt from the journal).
  std::string id, type, input, parent;
  run_status status = run_status::running;
  std::string value;  // result, error or reason (JSON text)
  uint64_t started_ms = 0, finished_ms = 0;
  struct op_result {
    op_kind op;
    std::string name;
    bool ok = true;
    std::string value;
  };
  std::map<uint32_t, op_result> journal;
  struct timer {
    op_kind op;
    std::string name;
    uint64_t due_ms = 0;
  };
  std::map<uint32_t, timer> timers;
  std::deque<std::pair<std::string, std::string>> inbox;  // (signal name, payload JSON)
  struct retry_state {
    std::string name;
    uint32_t attempt = 0;  // the attempt that failed
    uint64_t due_ms = 0;   // when the next one is due
    std::string error;
  };
  std::map<uint32_t, retry_state> retries;  // steps between attempts

  // Live state (this process).
  task<json> root;
  bool live = false;
  uint32_t next_seq = 0;
  std::coroutine_handle<> waiting;
  /// backlog: an operation that waits for fewer records not yet durable (max_records_ahead)
  /// before it writes its own; `parked_op` does it then (true: its result is set).
  enum class wait_kind { none, timer, signal, retry, backlog } wait = wait_kind::none;
  std::function<bool()> parked_op;
  uint32_t wait_seq = 0;
  std::string wait_name;
  uint64_t wait_due = never;
  // A step between attempts.
  std::function<json()> body;
  step_options options;
  std::string step_name;
  uint32_t attempt = 0;
  // The finished operation the awaiter takes.
  bool op_ok = true;
  json op_value;
  std::exception_ptr op_error;
  // A replay that diverged: the run is stopped in this process (nothing journaled).
  bool stopped = false;
  std::string stop_reason;
  std::string current;  // what it does now, for describe

  /// The journaled result of `seq`, checked against what the code asks for. nullptr when the
  /// journal has none; on divergence the run is stopped and `diverged` is set.
  const op_result* journaled(uint32_t seq, op_kind op, const std::string& name, bool& diverged) {
    diverged = false;
    auto it = journal.find(seq);
    if (it != journal.end()) {
      if (it->second.op != op || it->second.name != name) {
        stop(seq, it->second.op, it->second.name, op, name);
        diverged = true;
        return nullptr;
      }
      return &it->second;
    }
    auto t = timers.find(seq);
    if (t != timers.end() && (t->second.op != op || t->second.name != name)) {
      stop(seq, t->second.op, t->second.name, op, name);
      diverged = true;
    }
    auto r = retries.find(seq);
    if (r != retries.end() && (op != op_kind::step || r->second.name != name)) {
      stop(seq, op_kind::step, r->second.name, op, name);
      diverged = true;
    }
    return nullptr;
  }
  void stop(uint32_t seq, op_kind had, const std::string& had_name, op_kind asked,
            const std::string& asked_name) {
    auto describe_op = [](op_kind k, const std::string& n) {
      return std::string{op_name(k)} + (n.empty() ? "" : " '" + n + "'");
    };
    stopped = true;
    stop_reason = "replay diverged at operation " + std::to_string(seq) + " of workflow '" + id +
                  "': the journal has " + describe_op(had, had_name) + ", the code asked for " +
                  describe_op(asked, asked_name);
  }
  /// The start of every operation: takes its sequence number; `ready` when the journal answers
  /// it (a replay: the result is set), `stopped` when the journal has another operation there.
  enum class replay { live, ready, stopped };
  replay begin_op(uint32_t& seq, op_kind op, const std::string& name) {
    // An operation still parked was not co_awaited (against workflow.hpp's contract): it is
    // done now, in the code's order, before this one touches the run's fields.
    if (wait == wait_kind::backlog) owner->unpark_now(*this);
    seq = next_seq++;
    bool diverged = false;
    if (auto* j = journaled(seq, op, name, diverged)) {
      set_from_journal(*j);
      return replay::ready;
    }
    return diverged ? replay::stopped : replay::live;
  }
  void set_result(bool ok, json v) {
    op_ok = ok;
    op_value = std::move(v);
    op_error = nullptr;
  }
  void set_from_journal(const op_result& r) {
    if (r.op == op_kind::step && !r.ok) {
      op_ok = false;
      op_value = nullptr;
      op_error = std::make_exception_ptr(
          step_failed(r.name, json::parse(r.value, nullptr, false).is_string()
                                  ? json::parse(r.value).get<std::string>()
                                  : r.value));
      return;
    }
    set_result(r.ok, r.value.empty() ? json(nullptr) : json::parse(r.value, nullptr, false));
  }
};

using run_state = shard_runner::run_state;

/// How context and the awaiters reach a run (workflow_run is the public name of run_state).
struct run_access {
  static shard_runner::run_state& of(workflow_run* w) {
    return *reinterpret_cast<shard_runner::run_state*>(w);
  }
};

namespace detail_ops {
void park(workflow_run* w, std::coroutine_handle<> h) noexcept {
  run_access::of(w).waiting = h;
}
std::pair<bool, json> take(workflow_run* w) {
  auto& r = run_access::of(w);
  if (r.op_error) std::rethrow_exception(std::exchange(r.op_error, nullptr));
  return {r.op_ok, std::move(r.op_value)};
}
}  // namespace detail_ops

// -- the shard runner -----------------------------------------------------------------------

shard_runner::shard_runner(proto::shard_id shard, proto::epoch_t epoch, const registry& types,
                           runner_env& env, runner_settings settings)
    : shard_(shard), epoch_(epoch), types_(types), env_(env), settings_(settings) {}

shard_runner::~shard_runner() = default;

proto::result<void> shard_runner::restore(uint64_t lsn, proto::byte_view data) {
  if (lsn == 0) return {};
  auto recs = decode_checkpoint(data);
  if (!recs) return recs.err();
  for (auto& r : *recs)
    apply(r);
  next_lsn_ = lsn + 1;
  checkpoint_lsn_ = lsn;
  return {};
}

proto::result<void> shard_runner::replay(uint64_t lsn, proto::byte_view data) {
  auto r = decode_record(data);
  if (!r)
    return proto::error{r.err().code, "shard " + std::to_string(shard_.value()) + " record " +
                                          std::to_string(lsn) + ": " + r.err().message};
  apply(*r);
  next_lsn_ = lsn + 1;
  return {};
}

void shard_runner::start(uint64_t last_lsn) {
  next_lsn_ = last_lsn + 1;
  durable_ = last_lsn;
  records_first_ = next_lsn_;
  started_ = true;
  if (records_since_checkpoint() > 0) uncheckpointed_since_ms_ = env_.now_ms();  // replayed ones
  // Messages the previous lease sent and never saw acknowledged go out again (receivers
  // deduplicate by (from, outbox id)).
  for (auto& [id, m] : outbox_)
    resend(id, m);
  std::vector<run_state*> runs;
  for (auto& [id, run] : runs_)
    if (run->status == run_status::running) runs.push_back(run.get());
  for (auto* run : runs)
    run_start(*run);
  auto early = std::move(early_);
  for (auto& e : early) {
    if (e.is_call)
      handle_call(e.relay, e.method, e.body);
    else
      handle_message(e.from, e.from_epoch, e.outbox, e.body);
  }
}

// -- journal --------------------------------------------------------------------------------

uint64_t shard_runner::commit(record r) {
  if (next_lsn_ - 1 == checkpoint_lsn_) uncheckpointed_since_ms_ = env_.now_ms();
  apply(r);
  records_.push_back(encode(r));
  return next_lsn_++;
}

void shard_runner::apply(const record& r) {
  auto find = [&](const std::string& id) -> run_state* {
    auto it = runs_.find(id);
    return it == runs_.end() ? nullptr : it->second.get();
  };
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, rec::started>) {
          if (x.from != from_call) saw(x.from, x.outbox, x.at_ms);
          if (find(x.workflow)) return;
          auto run = std::make_unique<run_state>(this);
          run->id = x.workflow;
          run->type = x.type;
          run->input = x.input;
          run->parent = x.parent;
          run->started_ms = x.at_ms;
          runs_[x.workflow] = std::move(run);
        } else if constexpr (std::is_same_v<T, rec::op_done>) {
          auto* run = find(x.workflow);
          if (!run || run->status != run_status::running) return;
          run->journal[x.seq] = run_state::op_result{x.op, x.name, x.ok != 0, x.value};
          run->timers.erase(x.seq);
          run->retries.erase(x.seq);
          if (x.op == op_kind::step) ++steps_;
          if (x.op == op_kind::wait && x.ok) {
            auto it = std::find_if(run->inbox.begin(), run->inbox.end(),
                                   [&](auto& s) { return s.first == x.name; });
            if (it != run->inbox.end()) run->inbox.erase(it);
          }
        } else if constexpr (std::is_same_v<T, rec::timer_set>) {
          auto* run = find(x.workflow);
          if (!run || run->status != run_status::running) return;
          run->timers[x.seq] = run_state::timer{x.op, x.name, x.due_ms};
        } else if constexpr (std::is_same_v<T, rec::signal>) {
          if (x.from != from_call) saw(x.from, x.outbox, x.at_ms);
          if (!x.key.empty())
            took_key(x.workflow, x.key, x.at_ms, signal_digest(x.name, x.payload));
          auto* run = find(x.workflow);
          if (!run || run->status != run_status::running) return;
          run->inbox.emplace_back(x.name, x.payload);
        } else if constexpr (std::is_same_v<T, rec::sent>) {
          outbox_[x.outbox] = outbox_entry{x.target, x.payload};
          next_outbox_ = std::max(next_outbox_, x.outbox + 1);
          auto* run = find(x.workflow);
          if (!run || run->status != run_status::running) return;
          run->journal[x.seq] = run_state::op_result{x.op, x.name, true, ""};
        } else if constexpr (std::is_same_v<T, rec::acked>) {
          outbox_.erase(x.outbox);
          next_outbox_ = std::max(next_outbox_, x.outbox + 1);
        } else if constexpr (std::is_same_v<T, rec::finished>) {
          auto* run = find(x.workflow);
          if (!run) return;
          run->status = x.status;
          run->value = x.value;
          run->finished_ms = x.at_ms;
          run->journal.clear();
          run->timers.clear();
          run->inbox.clear();
          run->retries.clear();
        } else if constexpr (std::is_same_v<T, rec::seen>) {
          saw(x.from, x.outbox, x.at_ms);
        } else if constexpr (std::is_same_v<T, rec::forgotten>) {
          auto it = runs_.find(x.workflow);
          if (it != runs_.end() && it->second->status != run_status::running) runs_.erase(it);
          forget_signal_keys(x.workflow);  // a new run of the id starts with none
        } else if constexpr (std::is_same_v<T, rec::signal_key>) {
          took_key(x.workflow, x.key, x.at_ms, x.digest);
        } else if constexpr (std::is_same_v<T, rec::retry>) {
          auto* run = find(x.workflow);
          if (!run || run->status != run_status::running) return;
          run->retries[x.seq] = run_state::retry_state{x.name, x.attempt, x.due_ms, x.error};
        }
      },
      r);
}

std::optional<uint64_t> shard_runner::last_unacknowledged(uint32_t target,
                                                          const std::string& workflow) const {
  for (auto it = outbox_.rbegin(); it != outbox_.rend(); ++it) {
    if (it->second.target != target) continue;  // (another shard's: not its run)
    auto m = json::parse(it->second.payload, nullptr, false);
    if (m.is_object() && m.value("workflow", std::string{}) == workflow) return it->first;
  }
  return std::nullopt;
}

void shard_runner::resend(uint64_t id, outbox_entry& m) {
  m.sent_ms = env_.now_ms();
  gate(proto::relay{proto::request_head{0, shard_, epoch_}, proto::shard_id{m.target}, id,
                    to_bytes(m.payload)});
}

void shard_runner::saw(uint32_t from, uint64_t outbox, uint64_t at_ms) {
  auto& at = seen_[{from, outbox}];
  at = std::max(at, at_ms);
}

void shard_runner::took_key(const std::string& workflow, const std::string& key, uint64_t at_ms,
                            uint64_t digest) {
  auto& mark = signal_keys_[{workflow, key}];
  mark.at_ms = std::max(mark.at_ms, at_ms);
  mark.digest = digest;
}

void shard_runner::forget_signal_keys(const std::string& workflow) {
  auto it = signal_keys_.lower_bound({workflow, std::string{}});
  while (it != signal_keys_.end() && it->first.first == workflow)
    it = signal_keys_.erase(it);
}

void shard_runner::gate(proto::any_message m) {
  uint64_t lsn = last_lsn();
  if (lsn <= durable_)
    ready_.push_back(std::move(m));
  else
    gated_.emplace_back(lsn, std::move(m));
}

void shard_runner::reply(uint64_t relay, bool ok, const json& body) {
  auto text = dump(body);
  if (text.size() > settings_.max_reply_bytes) {
    ok = false;
    text = dump(call_error("too_large", "the answer of " + std::to_string(text.size()) +
                                            " bytes is over the limit of " +
                                            std::to_string(settings_.max_reply_bytes) +
                                            " bytes one reply can carry"));
  }
  gate(proto::call_reply{proto::request_head{0, shard_, epoch_}, relay, uint8_t(ok ? 1 : 0),
                         to_bytes(text)});
}

proto::append shard_runner::take_append(size_t max_bytes) {
  proto::append a{proto::request_head{0, shard_, epoch_}, proto::lsn_t{records_first_}, {}};
  size_t n = 0, bytes = 0;
  uint64_t limit = max_bytes == 0 ? UINT64_MAX : max_bytes;
  while (n < records_.size() && proto::batch_takes(n, bytes, records_[n].size(), limit))
    bytes += records_[n++].size();
  if (n == records_.size()) {
    a.records = std::move(records_);
    records_.clear();
  } else {
    a.records.assign(std::make_move_iterator(records_.begin()),
                     std::make_move_iterator(records_.begin() + static_cast<ptrdiff_t>(n)));
    records_.erase(records_.begin(), records_.begin() + static_cast<ptrdiff_t>(n));
  }
  records_first_ += n;
  return a;
}

void shard_runner::on_durable(uint64_t lsn) {
  if (lsn <= durable_) return;
  durable_ = lsn;
  if (!step_watch_.empty()) {
    auto now = std::chrono::steady_clock::now();
    for (; !step_watch_.empty() && step_watch_.front().lsn <= durable_; step_watch_.pop_front()) {
      auto& w = step_watch_.front();
      settings_.on_step_durable(step_durable{w.workflow, w.step, now - w.at, epoch_.value()});
    }
  }
  while (!gated_.empty() && gated_.front().first <= durable_) {
    ready_.push_back(std::move(gated_.front().second));
    gated_.pop_front();
  }
}

bool shard_runner::checkpoint_due(uint64_t now_ms) const {
  uint64_t n = records_since_checkpoint();
  if (n == 0 || !started_) return false;
  return n >= settings_.checkpoint_every ||
         (settings_.checkpoint_after_ms > 0 && now_ms >= uncheckpointed_since_ms_ &&
          now_ms - uncheckpointed_since_ms_ >= settings_.checkpoint_after_ms);
}

uint64_t shard_runner::checkpoint() {
  if (last_lsn() == 0 || last_lsn() == checkpoint_lsn_) return 0;
  if (last_lsn() < checkpoint_retry_lsn_) return 0;  // the last one was too large: later
  // Runs finished longer ago than the retention period are forgotten, by a record like every
  // other change, so a recovery that misses this checkpoint forgets them too.
  if (settings_.retention_ms) {
    uint64_t now = env_.now_ms();
    std::vector<std::string> expired;
    for (auto& [id, run] : runs_)
      if (run->status != run_status::running && run->finished_ms + settings_.retention_ms <= now)
        expired.push_back(id);
    for (auto& id : expired)
      commit(rec::forgotten{id});
    // Marks of messages taken that long ago leave with the snapshot (no record needed: a
    // recovery that still has them only recognises more resends).
    std::erase_if(seen_, [&](auto& m) { return m.second + settings_.retention_ms <= now; });
    std::erase_if(signal_keys_,
                  [&](auto& k) { return k.second.at_ms + settings_.retention_ms <= now; });
  }
  auto data = encode_checkpoint(snapshot());
  if (data.size() > proto::max_record_size) {
    env_.log("shard " + std::to_string(shard_.value()) + ": a checkpoint of " +
             std::to_string(data.size()) +
             " bytes is over the record limit; recovery replays the "
             "log instead (shorten the retention or keep results smaller)");
    checkpoint_retry_lsn_ = last_lsn() + settings_.checkpoint_every;
    return 0;
  }
  checkpoint_lsn_ = last_lsn();
  uint64_t id = env_.next_request_id();
  gate(proto::checkpoint{proto::request_head{id, shard_, epoch_}, proto::lsn_t{checkpoint_lsn_},
                         std::move(data)});
  return id;
}

std::vector<record> shard_runner::snapshot() const {
  std::vector<record> out;
  for (auto& [id, run] : runs_) {
    out.push_back(
        rec::started{run->id, run->type, run->input, run->parent, from_call, 0, run->started_ms});
    if (run->status != run_status::running) {
      out.push_back(rec::finished{run->id, run->status, run->value, run->finished_ms});
      continue;
    }
    for (auto& [seq, op] : run->journal)
      out.push_back(rec::op_done{run->id, seq, op.op, op.name, uint8_t(op.ok ? 1 : 0), op.value});
    for (auto& [seq, t] : run->timers)
      out.push_back(rec::timer_set{run->id, seq, t.op, t.name, t.due_ms});
    for (auto& [name, payload] : run->inbox)
      out.push_back(rec::signal{run->id, name, payload, from_call, 0, 0, {}});
    for (auto& [seq, r] : run->retries)
      out.push_back(rec::retry{run->id, seq, r.name, r.attempt, r.due_ms, r.error});
  }
  // The outbox id counter first (applying `acked` erases that id), then what is unacknowledged.
  if (next_outbox_ > 1) out.push_back(rec::acked{next_outbox_ - 1});
  for (auto& [id, m] : outbox_)
    out.push_back(rec::sent{"", 0, op_kind::send, "", id, m.target, m.payload});
  for (auto& [key, at] : seen_)
    out.push_back(rec::seen{key.first, key.second, at});
  for (auto& [key, mark] : signal_keys_)
    out.push_back(rec::signal_key{key.first, key.second, mark.at_ms, mark.digest});
  return out;
}

// -- running workflows ----------------------------------------------------------------------

/// Answers the `result` calls `which` selects with their run's state now, and drops them.
template <class Which>
void shard_runner::answer_waits(Which which) {
  std::erase_if(result_waits_, [&](const result_wait& w) {
    if (!which(w)) return false;
    if (auto r = runs_.find(w.workflow); r != runs_.end())
      reply(w.relay, true, status_of(*r->second));
    return true;
  });
}

void shard_runner::run_start(run_state& run) {
  auto* fn = types_.find(run.type);
  if (!fn) return;  // no code here: reported in IDLE, describe says so
  run.live = true;
  run.next_seq = 0;
  run.stopped = false;
  try {
    run.root = (*fn)(run.ctx, run.input.empty() ? json(nullptr) : json::parse(run.input));
  } catch (const std::exception& e) {
    run.stopped = true;
    run.stop_reason = std::string{"the workflow could not start: "} + e.what();
    return;
  }
  run.waiting = {};
  run.root.get().resume();
  after_resume(run);
}

void shard_runner::resume(run_state& run) {
  auto h = std::exchange(run.waiting, {});
  run.wait = run_state::wait_kind::none;
  run.wait_due = never;
  if (h) h.resume();
  after_resume(run);
}

void shard_runner::after_resume(run_state& run) {
  // Ended with an operation parked that it did not co_await: done before the run's end (a
  // stopped run writes nothing more: it is dropped).
  if (run.wait == run_state::wait_kind::backlog && run.root.done() && !run.stopped) unpark_now(run);
  if (run.stopped) {
    env_.log("shard " + std::to_string(shard_.value()) + ": " + run.stop_reason);
    if (run.wait == run_state::wait_kind::backlog) {
      --parked_;
      run.wait = run_state::wait_kind::none;
      run.parked_op = nullptr;
    }
    run.root = task<json>{};
    run.live = false;
    run.current = "stopped";
  } else if (run.root.done()) {
    rec::finished f{run.id, run_status::completed, "", env_.now_ms()};
    try {
      f.value = dump(run.root.take());
    } catch (const std::exception& e) {
      f.status = run_status::failed;
      f.value = dump(json(e.what()));
    } catch (...) {
      f.status = run_status::failed;
      f.value = dump(json("the workflow threw something that is not a std::exception"));
    }
    run.root = task<json>{};
    run.live = false;
    run.current.clear();
    commit(std::move(f));
    answer_waits([&](const result_wait& w) { return w.workflow == run.id; });
  }
}

/// A waiting run whose signal is in its inbox takes it.
void shard_runner::deliver_signals(run_state& run) {
  if (run.wait != run_state::wait_kind::signal) return;
  auto it = std::find_if(run.inbox.begin(), run.inbox.end(),
                         [&](auto& s) { return s.first == run.wait_name; });
  if (it == run.inbox.end()) return;
  std::string payload = it->second;
  commit(rec::op_done{run.id, run.wait_seq, op_kind::wait, run.wait_name, 1, payload});
  run.set_result(true, json::parse(payload, nullptr, false));
  resume(run);
}

void shard_runner::tick() {
  if (!started_ || leaving_) return;  // a worker that leaves runs nothing new: the next holder
  uint64_t now = env_.now_ms();
  std::vector<run_state*> due;
  for (auto& [id, run] : runs_)
    if (run->live && run->wait != run_state::wait_kind::none && run->wait_due <= now)
      due.push_back(run.get());
  // What came due writes a record too, so it waits behind the bound like any operation: a
  // storm of due timers or retries does not run ahead of the disk in one turn.
  for (auto* run : due) {
    bool ready = false;
    switch (run->wait) {
    case run_state::wait_kind::timer:
      ready = now_or_parked(
          *run, [] { return std::string{"sleep (ended)"}; },
          [this, run, seq = run->wait_seq] {
            commit(rec::op_done{run->id, seq, op_kind::sleep, "", 1, ""});
            run->set_result(true, nullptr);
            return true;
          });
      break;
    case run_state::wait_kind::signal:
      ready = now_or_parked(
          *run, [&] { return "waiting for signal '" + run->wait_name + "' (timed out)"; },
          [this, run, seq = run->wait_seq, name = run->wait_name] {
            commit(rec::op_done{run->id, seq, op_kind::wait, name, 0, ""});
            run->set_result(false, nullptr);
            return true;
          });
      break;
    case run_state::wait_kind::retry:
      ready = now_or_parked(
          *run,
          [&] {
            return "step '" + run->step_name + "' (attempt " + std::to_string(run->attempt + 1) +
                   ")";
          },
          [this, run] {
            ++run->attempt;
            return attempt_step(*run);
          });
      break;
    case run_state::wait_kind::none:
    case run_state::wait_kind::backlog:  // (never due by time: resume_parked())
      break;
    }
    if (ready) resume(*run);
  }
  if (parked_ > 0 && !backlogged()) resume_parked();
  // Unacknowledged messages go out again now and then (receivers deduplicate): a target holder
  // that died before its record was durable has lost the first delivery.
  for (auto& [id, m] : outbox_)
    if (m.sent_ms + settings_.resend_every_ms <= now) resend(id, m);
  answer_waits([&](const result_wait& w) { return w.deadline_ms <= now; });
}

template <class What, class Op>
bool shard_runner::now_or_parked(run_state& run, What what, Op op) {
  // Behind parked operations, first parked first: a run woken by a frame (a start, a signal)
  // does not take the turn from runs parked before it.
  if (parked_ == 0 && !backlogged() && !env_.turn_over()) return op();
  park(run, what(), std::move(op));
  return false;
}

void shard_runner::resume_parked() {
  if (leaving_) return;  // the next holder runs them
  while (!parked_ids_.empty() && !backlogged() && !env_.turn_over()) {
    auto it = runs_.find(parked_ids_.front());
    parked_ids_.pop_front();
    if (it == runs_.end() || !it->second->live || it->second->wait != run_state::wait_kind::backlog)
      continue;  // cancelled meanwhile
    auto& run = *it->second;
    --parked_;
    run.wait = run_state::wait_kind::none;
    auto op = std::move(run.parked_op);
    if (op()) resume(run);  // (its next operation parks again at the back if the bound comes)
  }
  if (parked_ == 0) parked_ids_.clear();
}

void shard_runner::leave() {
  leaving_ = true;
  answer_waits([](const result_wait&) { return true; });
}

uint64_t shard_runner::next_wake_ms() const {
  uint64_t at = never;
  if (!started_) return at;
  for (auto& [id, run] : runs_)
    if (run->live && run->wait != run_state::wait_kind::none) at = std::min(at, run->wait_due);
  if (parked_ > 0 && !backlogged() && !leaving_) at = std::min(at, env_.now_ms());
  for (auto& w : result_waits_)
    at = std::min(at, w.deadline_ms);
  for (auto& [id, m] : outbox_)
    at = std::min(at, m.sent_ms + settings_.resend_every_ms);
  return at;
}

uint64_t shard_runner::next_due_ms() const {
  uint64_t at = never;
  for (auto& [id, run] : runs_) {
    // A stopped run waits for other code, a run without code here for another worker (its type
    // is reported): neither makes this shard due.
    if (run->status != run_status::running || run->stopped || !types_.find(run->type)) continue;
    if (run->live && run->wait == run_state::wait_kind::backlog) at = std::min(at, env_.now_ms());
    if (run->live && run->wait != run_state::wait_kind::none) at = std::min(at, run->wait_due);
    for (auto& [seq, t] : run->timers)
      at = std::min(at, t.due_ms);
    for (auto& [seq, r] : run->retries)
      at = std::min(at, r.due_ms);
  }
  if (!outbox_.empty()) at = std::min(at, env_.now_ms() + settings_.resend_after_ms);
  return at;
}

bool shard_runner::quiet() const {
  return started_ && records_.empty() && durable_ >= last_lsn() && gated_.empty() &&
         ready_.empty() && result_waits_.empty() && (parked_ == 0 || leaving_);
}

std::vector<std::string> shard_runner::missing_types() const {
  std::set<std::string> out;
  for (auto& [id, run] : runs_)
    if (run->status == run_status::running && !types_.find(run->type)) out.insert(run->type);
  return {out.begin(), out.end()};
}

size_t shard_runner::running() const {
  size_t n = 0;
  for (auto& [id, run] : runs_)
    n += run->status == run_status::running;
  return n;
}

// -- calls and messages ---------------------------------------------------------------------

void shard_runner::on_call(uint64_t relay, const std::string& method, proto::byte_view args) {
  if (!started_) {
    early_.push_back(early_event{true, relay, method, 0, 0, 0, {args.begin(), args.end()}});
    return;
  }
  handle_call(relay, method, args);
}

void shard_runner::on_message(uint32_t from, uint64_t from_epoch, uint64_t outbox,
                              proto::byte_view payload) {
  if (!started_) {
    early_.push_back(
        early_event{false, 0, "", from, from_epoch, outbox, {payload.begin(), payload.end()}});
    return;
  }
  handle_message(from, from_epoch, outbox, payload);
}

void shard_runner::on_ack(uint64_t outbox) {
  if (outbox_.count(outbox)) commit(rec::acked{outbox});
}

json shard_runner::status_of(const run_state& run) const {
  json out{{"id", run.id}, {"type", run.type}, {"status", status_name(run.status)}};
  if (run.status == run_status::running && run.stopped) {
    out["status"] = "stopped";
    out["error"] = run.stop_reason;
  } else if (run.status == run_status::completed) {
    out["result"] = json::parse(run.value, nullptr, false);
  } else if (run.status == run_status::failed || run.status == run_status::cancelled) {
    auto v = json::parse(run.value, nullptr, false);
    out["error"] = v.is_string() ? v : json(run.value);
  }
  return out;
}

json shard_runner::describe(const run_state& run) const {
  json out = status_of(run);
  out["shard"] = shard_.value();
  out["started_at_ms"] = run.started_ms;
  if (!run.parent.empty()) out["parent"] = run.parent;
  if (run.finished_ms) out["finished_at_ms"] = run.finished_ms;
  if (run.status != run_status::running) return out;
  out["input"] = run.input.empty() ? json(nullptr) : json::parse(run.input, nullptr, false);
  out["operations"] = run.journal.size();
  if (!types_.find(run.type))
    out["current"] = "waiting for a worker with code for type '" + run.type + "'";
  else if (!run.current.empty())
    out["current"] = run.current;
  json timers = json::array();
  uint64_t now = env_.now_ms();
  for (auto& [seq, t] : run.timers)
    timers.push_back(json{{"operation", seq},
                          {"kind", op_name(t.op)},
                          {"name", t.name},
                          {"due_at_ms", t.due_ms},
                          {"due_in_ms", t.due_ms > now ? t.due_ms - now : 0}});
  out["timers"] = timers;
  json signals = json::array();
  for (auto& [name, payload] : run.inbox)
    signals.push_back(json{{"name", name}, {"payload", json::parse(payload, nullptr, false)}});
  out["pending_signals"] = signals;
  // The latest steps only: a run of a million steps would make an answer of megabytes, parsed
  // value by value on the worker's loop thread.
  std::vector<const run_state::op_result*> latest;
  uint64_t omitted = 0;
  for (auto it = run.journal.rbegin(); it != run.journal.rend(); ++it)
    if (it->second.op != op_kind::step)
      continue;
    else if (latest.size() < describe_steps)
      latest.push_back(&it->second);
    else
      ++omitted;
  json steps = json::array();
  for (auto it = latest.rbegin(); it != latest.rend(); ++it) {
    auto& op = **it;
    json v = json::parse(op.value, nullptr, false);
    steps.push_back(json{{"name", op.name}, {"ok", op.ok}, {op.ok ? "value" : "error", v}});
  }
  out["steps"] = steps;
  if (omitted > 0) out["steps_omitted"] = omitted;
  return out;
}

void shard_runner::handle_call(uint64_t relay, const std::string& method, proto::byte_view raw) {
  static const char* methods = "start, signal, result, describe, cancel";
  auto unknown_method = [&] {
    reply(relay, false,
          call_error("bad_request", "unknown method '" + method + "'; methods: " + methods));
  };
  // Named before its arguments are looked at (every method below takes an "id").
  if (method != "start" && method != "signal" && method != "result" && method != "describe" &&
      method != "cancel")
    return unknown_method();
  json args = json::parse(raw.begin(), raw.end(), nullptr, false);
  if (args.is_discarded() || !args.is_object())
    return reply(
        relay, false,
        call_error("bad_request", "the arguments of '" + method + "' must be a JSON object"));
  auto str = [&](const char* key, std::string& out) {
    auto it = args.find(key);
    if (it == args.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
      return false;
    out = it->get<std::string>();
    return true;
  };
  std::string id;
  if (!str("id", id))
    return reply(relay, false,
                 call_error("bad_request", "'" + method + "' needs \"id\": a non-empty string"));
  auto it = runs_.find(id);
  run_state* run = it == runs_.end() ? nullptr : it->second.get();
  auto not_found = [&] {
    reply(relay, false,
          call_error("not_found",
                     "no workflow '" + id + "' on shard " + std::to_string(shard_.value())));
  };

  if (method == "start") {
    std::string type;
    if (!str("type", type))
      return reply(relay, false, call_error("bad_request", "'start' needs \"type\": a string"));
    if (run) {
      if (run->type != type)
        return reply(relay, false,
                     call_error("conflict", "workflow '" + id + "' exists with type '" + run->type +
                                                "', not '" + type + "'"));
      json out = status_of(*run);
      out["existing"] = true;
      return reply(relay, true, out);
    }
    // (A run started before the rule is still found above.)
    if (auto bad = proto::bad_workflow_name("the workflow id", id))
      return reply(relay, false,
                   call_error("bad_request", *bad + " (the HTTP API could not reach it)"));
    if (!types_.find(type))
      return reply(relay, false,
                   call_error("unknown_type", "unknown workflow type '" + type +
                                                  "'; this worker has: " + types_.list()));
    auto input = dump(args.contains("input") ? args["input"] : json(nullptr));
    if (input.size() > max_value_size)
      return reply(relay, false,
                   call_error("bad_request",
                              "the input is over " + std::to_string(max_value_size) + " bytes"));
    commit(rec::started{id, type, std::move(input), "", from_call, 0, env_.now_ms()});
    auto& r = *runs_[id];
    run_start(r);
    json out = status_of(r);
    out["existing"] = false;
    return reply(relay, true, out);
  }
  if (!run) return not_found();
  if (method == "signal") {
    std::string name, key;
    if (!str("name", name))
      return reply(relay, false, call_error("bad_request", "'signal' needs \"name\": a string"));
    auto payload = dump(args.contains("payload") ? args["payload"] : json(nullptr));
    auto delivered = [&](std::optional<bool> duplicate) {  // (a keyed signal says which)
      json out{{"id", id}, {"signal", name}, {"delivered", true}};
      if (duplicate) out["duplicate"] = *duplicate;
      return reply(relay, true, out);
    };
    if (auto k = args.find("key"); k != args.end()) {
      if (!k->is_string())
        return reply(relay, false, call_error("bad_request", "\"key\" must be a string"));
      key = k->get<std::string>();
      if (auto bad = proto::bad_workflow_name("the signal's idempotency key", key))
        return reply(relay, false, call_error("bad_request", *bad));
      // A retry of one taken is answered as delivered (once), whatever happened since; the key
      // reused for another signal is refused, not taken for a retry.
      if (auto it = signal_keys_.find({id, key}); it != signal_keys_.end()) {
        if (it->second.digest != signal_digest(name, payload))
          return reply(relay, false,
                       call_error("conflict", "the idempotency key '" + key + "' of workflow '" +
                                                  id +
                                                  "' was used by a signal with another name or "
                                                  "payload; this one was not delivered"));
        return delivered(true);
      }
    }
    if (run->status != run_status::running)
      return reply(relay, false,
                   call_error("finished", "workflow '" + id + "' is " + status_name(run->status) +
                                              "; signal not delivered"));
    if (payload.size() > max_value_size)
      return reply(relay, false,
                   call_error("bad_request",
                              "the payload is over " + std::to_string(max_value_size) + " bytes"));
    commit(rec::signal{id, name, std::move(payload), from_call, 0, env_.now_ms(), key});
    deliver_signals(*run);
    return delivered(key.empty() ? std::nullopt : std::optional<bool>{false});
  }
  if (method == "result") {
    uint64_t wait_ms = 0;
    if (auto w = args.find("wait_ms"); w != args.end()) {
      if (!w->is_number_unsigned() && !(w->is_number_integer() && w->get<int64_t>() >= 0))
        return reply(relay, false,
                     call_error("bad_request", "\"wait_ms\" must be a non-negative integer"));
      wait_ms = std::min<uint64_t>(w->get<uint64_t>(), settings_.max_result_wait_ms);
    }
    if (run->status == run_status::running && !run->stopped && wait_ms > 0 && !leaving_) {
      result_waits_.push_back(result_wait{relay, id, env_.now_ms() + wait_ms});
      return;
    }
    return reply(relay, true, status_of(*run));
  }
  if (method == "describe") return reply(relay, true, describe(*run));
  if (method == "cancel") {
    if (run->status == run_status::running) {
      std::string reason = "cancelled";
      if (auto r = args.find("reason"); r != args.end() && r->is_string())
        reason = r->get<std::string>();
      run->root = task<json>{};  // destroys the suspended frames
      run->live = false;
      run->waiting = {};
      if (run->wait == run_state::wait_kind::backlog) --parked_;
      run->wait = run_state::wait_kind::none;
      run->parked_op = nullptr;  // (a parked send's payload, say)
      run->body = nullptr;
      commit(rec::finished{id, run_status::cancelled, dump(json(reason)), env_.now_ms()});
      answer_waits([&](const result_wait& w) { return w.workflow == id; });
    }
    return reply(relay, true, status_of(*run));
  }
  unknown_method();
}

void shard_runner::handle_message(uint32_t from, uint64_t from_epoch, uint64_t outbox,
                                  proto::byte_view raw) {
  auto ack = [&] {
    gate(proto::message_ack{proto::request_head{0, shard_, epoch_}, proto::shard_id{from},
                            proto::epoch_t{from_epoch}, outbox});
  };
  if (seen_.count({from, outbox})) return ack();  // a resend of one already taken
  json m = json::parse(raw.begin(), raw.end(), nullptr, false);
  auto field = [&](const char* k) {
    auto it = m.is_object() ? m.find(k) : m.end();
    return m.is_object() && it != m.end() && it->is_string() ? it->get<std::string>()
                                                             : std::string{};
  };
  std::string kind = field("kind"), id = field("workflow");
  auto drop = [&](const std::string& why) {
    env_.log("shard " + std::to_string(shard_.value()) + ": message " + std::to_string(outbox) +
             " from shard " + std::to_string(from) + " dropped: " + why);
    commit(rec::seen{from, outbox, env_.now_ms()});
    ack();
  };
  if (id.empty()) return drop("it names no workflow");
  auto it = runs_.find(id);
  run_state* run = it == runs_.end() ? nullptr : it->second.get();
  if (kind == "signal") {
    std::string name = field("name");
    if (name.empty()) return drop("a signal without a name");
    if (!run) {
      // Sent after a message for the run this shard has not taken yet (the run's start, its
      // first delivery lost): not taken now, nor acknowledged; the sender sends it again.
      if (auto after = m.find("after"); after != m.end() && after->is_number_unsigned() &&
                                        !seen_.count({from, after->get<uint64_t>()}))
        return;
      return drop("no workflow '" + id + "' here");
    }
    if (run->status != run_status::running)
      return drop("workflow '" + id + "' is " + status_name(run->status));
    commit(rec::signal{id,
                       name,
                       m.contains("payload") ? dump(m["payload"]) : "null",
                       from,
                       outbox,
                       env_.now_ms(),
                       {}});
    ack();
    deliver_signals(*run);
    return;
  }
  if (kind == "start") {
    std::string type = field("type");
    if (type.empty()) return drop("a start without a type");
    if (run) {  // the id is the idempotency key: an existing run stays as it is
      commit(rec::seen{from, outbox, env_.now_ms()});
      return ack();
    }
    commit(rec::started{id, type, m.contains("input") ? dump(m["input"]) : "null", field("parent"),
                        from, outbox, env_.now_ms()});
    ack();
    run_start(*runs_[id]);
    return;
  }
  drop("unknown message kind '" + kind + "'");
}

// -- operations (the context) ---------------------------------------------------------------

namespace {
uint64_t ms_after(runner_env& env, std::chrono::milliseconds d) {
  return env.now_ms() + static_cast<uint64_t>(std::max<int64_t>(0, d.count()));
}
}  // namespace

/// One attempt of the step `run` is on. True when the step is over (run.op_* set), false when
/// it waits for its next attempt.
bool shard_runner::attempt_step(run_state& run) {
  auto& owner = *this;
  run.current = "step '" + run.step_name + "'";
  owner.env_.before_step();
  std::string message;
  bool retry = false;
  try {
    std::string text = dump(run.body());
    if (text.size() > max_value_size)
      throw permanent_error("its result of " + std::to_string(text.size()) +
                            " bytes is over the journal's limit of " +
                            std::to_string(max_value_size));
    // The value as the journal holds it (dump() writes NaN as null and replaces bytes that are
    // not UTF-8): a replay reads that, so the live run sees the same.
    json v = json::parse(text);
    uint64_t lsn = commit(
        rec::op_done{run.id, run.wait_seq, op_kind::step, run.step_name, 1, std::move(text)});
    if (settings_.on_step_durable)
      step_watch_.push_back({lsn, run.id, run.step_name, std::chrono::steady_clock::now()});
    run.set_result(true, std::move(v));
    run.body = nullptr;
    return true;
  } catch (const permanent_error& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = e.what();
    try {
      retry = !run.options.retry_if || run.options.retry_if(e);
    } catch (...) {
      retry = false;  // a retry_if that throws cannot say yes
    }
  } catch (...) {
    message = "the step threw something that is not a std::exception";
  }
  if (retry && run.attempt < run.options.attempts) {
    double base = double(run.options.backoff.count()) *
                  std::pow(run.options.multiplier, double(run.attempt - 1));
    base = std::min(base, double(run.options.max_backoff.count()));
    double jitter = std::clamp(run.options.jitter, 0.0, 1.0);
    double u = double(owner.env_.random() % 1000000) / 1000000.0;
    uint64_t delay = static_cast<uint64_t>(base * (1.0 - jitter * u));
    run.wait = run_state::wait_kind::retry;
    run.wait_due = owner.env_.now_ms() + delay;
    commit(rec::retry{run.id, run.wait_seq, run.step_name, run.attempt, run.wait_due, message});
    run.current = "step '" + run.step_name + "' (attempt " + std::to_string(run.attempt + 1) +
                  " in " + std::to_string(delay) + " ms; last error: " + message + ")";
    return false;
  }
  std::string text = dump(json(message));
  message = json::parse(text).get<std::string>();  // as a replay will read it back
  uint64_t lsn =
      commit(rec::op_done{run.id, run.wait_seq, op_kind::step, run.step_name, 0, std::move(text)});
  if (settings_.on_step_durable)
    step_watch_.push_back({lsn, run.id, run.step_name, std::chrono::steady_clock::now()});
  run.op_ok = false;
  run.op_error = std::make_exception_ptr(step_failed(run.step_name, message));
  run.body = nullptr;
  return true;
}

const std::string& context::id() const {
  return run_access::of(run_).id;
}
uint64_t context::lease_epoch() const {
  return run_access::of(run_).owner->epoch().value();
}
const std::string& context::type() const {
  return run_access::of(run_).type;
}

op_awaitable<json> context::step_impl(std::string name, std::function<json()> body,
                                      step_options options) {
  auto& run = run_access::of(run_);
  uint32_t seq = 0;
  if (auto r = run.begin_op(seq, op_kind::step, name); r != run_state::replay::live)
    return {run_, r == run_state::replay::ready};
  run.current = "step '" + name + "'";
  run.wait_seq = seq;
  run.step_name = std::move(name);
  run.body = std::move(body);
  run.options = std::move(options);
  if (run.options.attempts == 0) run.options.attempts = 1;
  run.attempt = 1;
  if (auto r = run.retries.find(seq); r != run.retries.end()) {
    // An earlier holder's attempts failed: go on with the next one, at its time.
    run.attempt = r->second.attempt + 1;
    if (r->second.due_ms > run.owner->env_.now_ms()) {
      run.attempt = r->second.attempt;  // tick() counts the next attempt when it is due
      run.wait = run_state::wait_kind::retry;
      run.wait_due = r->second.due_ms;
      run.current = "step '" + run.step_name + "' (attempt " + std::to_string(run.attempt + 1) +
                    " due at " + std::to_string(r->second.due_ms) +
                    "; last error: " + r->second.error + ")";
      return {run_, false};
    }
  }
  auto* owner = run.owner;
  return {run_, owner->now_or_parked(
                    run, [&] { return run.current; },
                    [owner, &run] { return owner->attempt_step(run); })};
}

void shard_runner::unpark_now(run_state& run) {
  --parked_;
  if (!parked_ids_.empty() && parked_ids_.back() == run.id) parked_ids_.pop_back();  // (its own)
  run.wait = run_state::wait_kind::none;
  auto op = std::move(run.parked_op);
  op();
}

void shard_runner::park(run_state& run, const std::string& what, std::function<bool()> op) {
  run.wait = run_state::wait_kind::backlog;
  run.wait_due = never;
  run.current = backlogged() ? what + " (waits: " + std::to_string(last_lsn() - durable_) +
                                   " of the shard's records are not yet durable)"
                             : what + " (waits for the worker's next turn)";
  run.parked_op = std::move(op);
  ++parked_;
  parked_ids_.push_back(run.id);
}

op_awaitable<void> context::sleep(std::chrono::milliseconds d) {
  auto& run = run_access::of(run_);
  uint32_t seq = 0;
  if (auto r = run.begin_op(seq, op_kind::sleep, ""); r != run_state::replay::live)
    return {run_, r == run_state::replay::ready};
  auto* owner = run.owner;
  return {run_, owner->now_or_parked(
                    run, [] { return std::string{"sleep"}; },
                    [owner, &run, seq, d] { return owner->begin_sleep(run, seq, d); })};
}

bool shard_runner::begin_sleep(run_state& run, uint32_t seq, std::chrono::milliseconds d) {
  uint64_t due;
  if (auto t = run.timers.find(seq); t != run.timers.end())
    due = t->second.due_ms;
  else
    commit(rec::timer_set{run.id, seq, op_kind::sleep, "", due = ms_after(env_, d)});
  if (due <= env_.now_ms()) {
    commit(rec::op_done{run.id, seq, op_kind::sleep, "", 1, ""});
    run.set_result(true, nullptr);
    return true;
  }
  run.wait = run_state::wait_kind::timer;
  run.wait_seq = seq;
  run.wait_due = due;
  run.current = "sleep";
  return false;
}

op_awaitable<std::optional<json>> context::wait_for(std::string name,
                                                    std::chrono::milliseconds timeout) {
  auto& run = run_access::of(run_);
  uint32_t seq = 0;
  if (auto r = run.begin_op(seq, op_kind::wait, name); r != run_state::replay::live)
    return {run_, r == run_state::replay::ready};
  auto* owner = run.owner;
  return {run_, owner->now_or_parked(
                    run, [&] { return "waiting for signal '" + name + "'"; },
                    [owner, &run, seq, name, timeout] {
                      return owner->begin_wait(run, seq, name, timeout);
                    })};
}

bool shard_runner::begin_wait(run_state& run, uint32_t seq, const std::string& name,
                              std::chrono::milliseconds timeout) {
  uint64_t due;
  if (auto t = run.timers.find(seq); t != run.timers.end())
    due = t->second.due_ms;
  else
    commit(rec::timer_set{run.id, seq, op_kind::wait, name, due = ms_after(env_, timeout)});
  run.wait = run_state::wait_kind::signal;
  run.wait_seq = seq;
  run.wait_name = name;
  run.wait_due = due;
  run.current = "waiting for signal '" + name + "'";
  auto it =
      std::find_if(run.inbox.begin(), run.inbox.end(), [&](auto& s) { return s.first == name; });
  if (it != run.inbox.end()) {
    std::string payload = it->second;
    commit(rec::op_done{run.id, seq, op_kind::wait, name, 1, payload});
    run.set_result(true, json::parse(payload, nullptr, false));
  } else if (due <= env_.now_ms()) {
    commit(rec::op_done{run.id, seq, op_kind::wait, name, 0, ""});
    run.set_result(false, nullptr);
  } else {
    return false;
  }
  run.wait = run_state::wait_kind::none;
  run.wait_due = never;
  return true;
}

op_awaitable<void> context::send(std::string workflow_id, std::string name, json payload) {
  json m{{"kind", "signal"}, {"workflow", workflow_id}, {"name", name}, {"payload", payload}};
  return run_access::of(run_).owner->send_op(run_access::of(run_), run_, op_kind::send, name,
                                             workflow_id, std::move(m));
}

op_awaitable<void> context::start_child(std::string type, std::string id, json input) {
  auto& run = run_access::of(run_);
  json m{{"kind", "start"}, {"workflow", id}, {"type", type}, {"input", input}, {"parent", run.id}};
  return run.owner->send_op(run, run_, op_kind::child, id, id, std::move(m));
}

op_awaitable<std::chrono::system_clock::time_point> context::now() {
  auto& run = run_access::of(run_);
  return {run_, run.owner->journal_value(run, op_kind::now)};
}

op_awaitable<uint64_t> context::random() {
  auto& run = run_access::of(run_);
  return {run_, run.owner->journal_value(run, op_kind::random)};
}

/// now() and random(): the journaled value on a replay, else a fresh one (taken when it is
/// journaled), journaled.
bool shard_runner::journal_value(run_state& run, op_kind op) {
  uint32_t seq = 0;
  if (auto r = run.begin_op(seq, op, ""); r != run_state::replay::live)
    return r == run_state::replay::ready;
  return now_or_parked(
      run, [op] { return std::string{op_name(op)} + "()"; },
      [this, &run, seq, op] {
        uint64_t fresh = op == op_kind::now ? env_.now_ms() : env_.random();
        commit(rec::op_done{run.id, seq, op, "", 1, std::to_string(fresh)});
        run.set_result(true, fresh);
        return true;
      });
}

op_awaitable<void> shard_runner::send_op(run_state& run, workflow_run* w, op_kind op,
                                         const std::string& name, const std::string& target_id,
                                         json message) {
  uint32_t seq = 0;
  if (auto r = run.begin_op(seq, op, name); r != run_state::replay::live)
    return {w, r == run_state::replay::ready};
  // A child the HTTP API could not reach is not started, and a message over the journal's limit
  // is not sent (its record could never be appended: every holder would be cut there). Nothing
  // is journaled: the checks are the same on a replay, and a journal from before them still
  // answers above.
  std::string payload = dump(message);
  auto refuse = [&](const std::string& why) -> op_awaitable<void> {
    run.set_result(false, nullptr);
    run.op_error =
        std::make_exception_ptr(std::invalid_argument(std::string{op_name(op)} + ": " + why));
    return {w, true};
  };
  if (op == op_kind::child)
    if (auto bad = proto::bad_workflow_name("the child's workflow id", target_id))
      return refuse(*bad + " (the HTTP API could not reach it)");
  if (size_t size = payload.size() + name.size() + run.id.size(); size > max_value_size)
    return refuse("its message of " + std::to_string(size) +
                  " bytes is over the journal's limit of " + std::to_string(max_value_size));
  return {w, now_or_parked(
                 run, [&] { return std::string{op_name(op)} + " '" + name + "'"; },
                 [this, &run, seq, op, name, target_id, payload = std::move(payload)]() mutable {
                   uint64_t outbox = next_outbox_;
                   uint32_t target = proto::shard_for(target_id, settings_.shard_count).value();
                   // A signal names the last message for its run not yet acknowledged (its
                   // child's start, say): a receiver without the run takes the signal only
                   // once it has taken that one (docs/protocol.md, "Messages between shards").
                   // The run as the outbox's payloads name it: dump() replaces bytes that are
                   // not UTF-8.
                   if (op == op_kind::send)
                     if (auto after = last_unacknowledged(
                             target, json::parse(dump(json(target_id))).get<std::string>())) {
                       auto m = json::parse(payload);  // (the message as the journal holds it)
                       m["after"] = *after;
                       payload = dump(m);
                     }
                   commit(rec::sent{run.id, seq, op, name, outbox, target, std::move(payload)});
                   resend(outbox, outbox_.at(outbox));
                   run.set_result(true, nullptr);
                   return true;
                 })};
}

}  // namespace fusee::worker
