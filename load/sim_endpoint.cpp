#include "load/sim_endpoint.hpp"

#include <chrono>

#include "app/http_server.hpp"
#include "protocol/invocation_request.hpp"
#include "worker/runtime.hpp"

namespace fusee::load {

uint64_t sim_endpoint::next_random() {
  std::lock_guard<std::mutex> lk{mtx_};
  return rng_();
}

bool sim_endpoint::roll(double rate) {
  if (rate <= 0) return false;
  return double(next_random() >> 11) / double(uint64_t{1} << 53) < rate;
}

std::unique_ptr<sim_endpoint> sim_endpoint::start(const worker::registry& types,
                                                  endpoint_behaviour behaviour, uint64_t seed,
                                                  std::string* err) {
  std::unique_ptr<sim_endpoint> e(new sim_endpoint);
  e->types_ = &types;
  e->b_ = std::move(behaviour);
  e->rng_.state = seed;
  auto* self = e.get();
  app::http_server::options o;
  o.max_body = proto::max_invocation_body;
  e->http_ = app::http_server::start(
      "127.0.0.1", 0,
      [self](const app::http_exchange& ex) {
        auto arrived = std::chrono::steady_clock::now();
        self->posts++;
        self->in_flight++;
        struct leave {  // every way out of the handler
          std::atomic<uint64_t>& n;
          ~leave() { n--; }
        } left{self->in_flight};
        double u_fail = self->b_.fail_rate, u_hang = self->b_.hang_rate;
        if (self->roll(u_fail)) {
          self->failed++;
          return app::http_reply{500, "application/json", R"({"error":"simulated failure"})"};
        }
        if (self->roll(u_hang)) {
          self->hung++;
          std::unique_lock<std::mutex> lk{self->mtx_};
          self->cv_.wait_for(lk, std::chrono::milliseconds(self->b_.hang_ms),
                             [self] { return self->stopping_; });
          return app::http_reply{504, "application/json", R"({"error":"simulated hang"})"};
        }
        auto sig = ex.headers.find("fusee-signature");
        auto v = worker::verify_invocation(sig == ex.headers.end() ? "" : sig->second, ex.body,
                                           {self->b_.secret});
        if (!v.request)
          return app::http_reply{v.refusal.http_status, "application/json", v.refusal.body};
        worker::worker_options wo;
        wo.name = "load-invoked";
        wo.log = [](const std::string&) {};
        wo.runner.on_step_durable = self->b_.on_step_durable;
        if (self->roll(self->b_.crash_rate)) {
          wo.drop_invocation_after_ms =
              1 +
              static_cast<uint32_t>(self->next_random() % std::max(1u, self->b_.crash_within_ms));
        }
        std::vector<uint32_t> shards;
        for (auto s : v.request->shards)
          shards.push_back(s.value());
        uint64_t token = self->b_.on_run ? self->b_.on_run(shards, arrived) : 0;
        worker::runtime rt(*self->types_, wo);
        auto out = rt.invoke(*v.request);
        self->ran++;
        if (wo.drop_invocation_after_ms && out.body.find("fault injection") != std::string::npos)
          self->crashed++;
        if (self->b_.on_ran) {
          auto body = worker::json::parse(out.body, nullptr, false);
          uint64_t lease_us = body.is_object() ? body.value("lease_us", uint64_t{0}) : 0;
          self->b_.on_ran(token, shards, lease_us);
        }
        return app::http_reply{out.http_status, "application/json", out.body};
      },
      err, std::move(o));
  if (!e->http_) return nullptr;
  return e;
}

uint16_t sim_endpoint::port() const {
  return http_->port();
}

void sim_endpoint::stop() {
  {
    std::lock_guard<std::mutex> lk{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  http_.reset();
}

sim_endpoint::~sim_endpoint() {
  stop();
}

}  // namespace fusee::load
