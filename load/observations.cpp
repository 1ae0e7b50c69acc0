#include "load/observations.hpp"

#include <algorithm>

#include "load/load_workflow.hpp"

namespace fusee::load {

using worker::json;

observations::observations(size_t starts, uint32_t shards)
    : intended(starts), answered(starts), completed(starts), counted(starts), durable_steps(starts),
      durable_epoch(starts), timer_seen(starts), signal_sent(starts), signal_answered(starts),
      cold(starts), active_(shards), pending_(shards) {
  for (auto& x : intended)
    x = -1;
  for (auto& x : signal_sent)
    x = -1;
}

void observations::start_answered_ok(uint64_t i) {
  ok++;  // (before the answer is marked: `done`, counted after it, never passes `ok`)
  answered[i] = 1;
  // Whichever of the answer and the end comes second counts the run (seq_cst: at least one of
  // the two sees the other's store; the exchange keeps it to one).
  if (completed[i] != 0 && counted[i].exchange(1) == 0) done++;
}

bool observations::run_completed(uint64_t i) {
  if (completed[i].exchange(1) != 0) return false;
  if (answered[i] == 1 && counted[i].exchange(1) == 0) done++;
  return true;
}

void observations::start_sent(uint32_t shard, uint64_t run, int64_t t) {
  if (!track_wakes || shard >= pending_.size()) return;
  std::lock_guard lk{wake_mtx_};
  if (active_[shard] == 0 && pending_[shard].since < 0) pending_[shard] = {t, run};
}

uint64_t observations::invocation_began(const std::vector<uint32_t>& shards,
                                        clock_type::time_point arrived) {
  if (!track_wakes) return UINT64_MAX;
  int64_t now = since_t0(arrived);
  uint64_t to_post = UINT64_MAX;
  std::lock_guard lk{wake_mtx_};
  for (auto s : shards) {
    if (s >= pending_.size()) continue;
    active_[s]++;
    auto& p = pending_[s];
    if (p.since >= 0 && to_post == UINT64_MAX) {
      to_post = static_cast<uint64_t>(std::max<int64_t>(0, now - p.since));
      if (p.run < cold.size()) cold[p.run] = 1;
    }
    p.since = -1;
  }
  return to_post;
}

void observations::invocation_ended(uint64_t token, const std::vector<uint32_t>& shards,
                                    uint64_t lease_us) {
  if (!track_wakes) return;
  {
    std::lock_guard lk{wake_mtx_};
    for (auto s : shards)
      if (s < active_.size() && active_[s] > 0) active_[s]--;
  }
  if (token == UINT64_MAX || lease_us == 0) return;  // not a cold wake, or it never leased
  std::lock_guard lk{mtx};
  wake_to_post.record(token);
  wake_server.record(token + lease_us * 1000);
}

void observations::step_ran(uint64_t i, uint32_t k, uint64_t epoch) {
  step_runs++;
  if (i >= durable_steps.size()) return;  // not this process's run (an earlier run's, resumed)
  if (k < tracked_steps && ((durable_steps[i] >> k) & 1) != 0) {
    if (epoch < durable_epoch[i]) {
      reran_by_deposed++;
    } else {
      reran_after_durable++;
      std::lock_guard lk{mtx};
      if (rerun_example.empty())
        rerun_example = "step s" + std::to_string(k) + " of " + run_id(i) +
                        " ran again after its record was reported durable";
    }
  }
  std::lock_guard lk{mtx};
  executions[{i, k}]++;
}

void observations::step_durable_now(const worker::step_durable& d) {
  auto i = index_of(d.workflow);
  if (!i || *i >= durable_steps.size() || d.step.size() < 2 || d.step[0] != 's') return;
  uint32_t k = static_cast<uint32_t>(std::strtoul(d.step.c_str() + 1, nullptr, 10));
  if (k < tracked_steps) durable_steps[*i] |= uint64_t{1} << k;
  for (uint64_t e = durable_epoch[*i];
       e < d.epoch && !durable_epoch[*i].compare_exchange_weak(e, d.epoch);) {
  }
  auto ns = static_cast<uint64_t>(std::max<int64_t>(0, d.since_body.count()));
  std::lock_guard lk{mtx};
  step_durable.record(ns);
  interval_step_durable.record(ns);
}

std::vector<std::string> commonest_refusals(const std::map<std::string, uint64_t>& refusals,
                                            size_t top) {
  std::vector<std::pair<uint64_t, std::string>> by_count;
  for (auto& [why, n] : refusals)
    by_count.emplace_back(n, why);
  std::stable_sort(by_count.begin(), by_count.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> lines;
  for (size_t i = 0; i < by_count.size() && i < top; ++i)
    lines.push_back(std::to_string(by_count[i].first) + " x " + by_count[i].second);
  if (by_count.size() > top)
    lines.push_back("and " + std::to_string(by_count.size() - top) +
                    " reasons more (\"refusals\" in the report)");
  return lines;
}

}  // namespace fusee::load
