#include "load/checker.hpp"

#include <algorithm>
#include <map>

#include "worker/client.hpp"

namespace fusee::load {

namespace {
using clock_type = std::chrono::steady_clock;
using worker::json;
constexpr size_t window = 1000;                  ///< calls in flight at once
constexpr std::chrono::milliseconds slice{100};  ///< the longest wait between looks at a stop
}  // namespace

std::vector<run_fate> ask_fates(const std::string& server, const client::security& sec,
                                const std::vector<std::string>& ids,
                                clock_type::time_point deadline, std::string* err,
                                const std::function<bool()>& stopped) {
  std::vector<run_fate> fates(ids.size());
  auto wc = worker::workflow_client::connect(server, "load-checker", sec);
  if (!wc) {
    *err = "the checker could not connect: " + wc.err().message;
    for (auto& f : fates)
      f.detail = *err;
    return fates;
  }
  std::map<uint64_t, size_t> in_flight;  // request id -> index
  size_t next = 0;
  std::vector<size_t> again;  // asked again: still running, or in doubt
  auto left_ms = [&] {
    return std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now())
               .count());
  };
  auto ask = [&](size_t i) {
    // A run still going gets up to 10 s to end within this call; parked up to 15 s while its
    // shard has no holder (after a restart the workers need a moment to hold them again).
    auto wait = static_cast<uint64_t>(std::min<int64_t>(left_ms(), 10000));
    auto rid = wc->send_call(ids[i], "result", "", json{{"id", ids[i]}, {"wait_ms", wait}}, 15000);
    if (!rid) {
      fates[i].detail = rid.err().message;
      return false;
    }
    in_flight[*rid] = i;
    return true;
  };
  auto stop_here = [&] {
    for (auto& [rid, i] : in_flight)
      fates[i].detail = "not asked to the end: the run was stopped";
    return fates;
  };
  for (;;) {
    if (stopped && stopped()) return stop_here();  // (answers may keep coming: looked at first)
    while (in_flight.size() < window && (!again.empty() || next < ids.size())) {
      size_t i;
      if (!again.empty()) {
        i = again.back();
        again.pop_back();
      } else {
        i = next++;
      }
      if (!ask(i)) return fates;  // the connection is gone: the rest stay unknown
    }
    if (in_flight.empty()) break;
    // Each call may take its wait plus its parking; past that, no answer is no answer. Waited
    // for in slices, each ending with a look at `stopped`.
    auto limit = clock_type::now() + std::chrono::milliseconds(left_ms() + 30000);
    auto r = wc->next_answer(std::chrono::milliseconds(0));
    while (!r && wc->timed_out() && clock_type::now() < limit) {
      if (stopped && stopped()) return stop_here();
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(limit - clock_type::now());
      r = wc->next_answer(std::clamp(left, std::chrono::milliseconds(0), slice));
    }
    if (!r) {
      for (auto& [rid, i] : in_flight)
        fates[i].detail = "no answer: " + r.err().message;
      break;
    }
    auto it = in_flight.find(r->request);
    if (it == in_flight.end()) continue;
    size_t i = it->second;
    in_flight.erase(it);
    auto& a = r->answer;
    bool time_left = left_ms() > 0;
    if (r->refused) {
      fates[i].detail = r->refused->to_string();
    } else if (a.ok()) {
      fates[i].status = a.body.value("status", "unknown");
      fates[i].detail = a.body.dump();
      if (fates[i].status == "running" && time_left) again.push_back(i);
    } else if (a.code() == "not_found") {
      fates[i].status = "not_found";
    } else {
      fates[i].detail = a.error();
      if ((a.status == proto::call_status::holder_lost ||
           a.status == proto::call_status::parked_too_long) &&
          time_left)
        again.push_back(i);
    }
  }
  return fates;
}

}  // namespace fusee::load
