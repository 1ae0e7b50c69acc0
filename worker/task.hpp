// task<T>: the coroutine type of workflows and of the functions they co_await. Lazy (it runs when
// awaited or resumed), one awaiter, symmetric transfer back to whoever awaited it. Destroying a
// task destroys its frame, and with it every frame it awaits.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

namespace fusee::worker {

template <class T>
class task;

namespace detail {

struct promise_base {
  std::exception_ptr error;
  std::coroutine_handle<> continuation;

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct final_awaiter {
    bool await_ready() noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      auto c = h.promise().continuation;
      return c ? c : std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  final_awaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() { error = std::current_exception(); }
};

template <class T>
struct promise : promise_base {
  std::optional<T> value;
  task<T> get_return_object();
  template <class U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
  T take() {
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }
};

template <>
struct promise<void> : promise_base {
  task<void> get_return_object();
  void return_void() {}
  void take() {
    if (error) std::rethrow_exception(error);
  }
};

}  // namespace detail

template <class T = void>
class [[nodiscard]] task {
public:
  using promise_type = detail::promise<T>;
  using handle = std::coroutine_handle<promise_type>;

  task() = default;
  explicit task(handle h) : h_(h) {}
  task(task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  task& operator=(task&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  ~task() {
    if (h_) h_.destroy();
  }

  // co_await a task: run it, come back when it is done.
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    h_.promise().continuation = awaiting;
    return h_;
  }
  T await_resume() { return h_.promise().take(); }

  // Driving a root task (the runtime does this).
  handle get() const { return h_; }
  bool done() const { return h_ && h_.done(); }
  /// The result, or the exception the task ended with. Only once done().
  T take() { return h_.promise().take(); }

private:
  handle h_;
};

namespace detail {
template <class T>
task<T> promise<T>::get_return_object() {
  return task<T>{std::coroutine_handle<promise<T>>::from_promise(*this)};
}
inline task<void> promise<void>::get_return_object() {
  return task<void>{std::coroutine_handle<promise<void>>::from_promise(*this)};
}
}  // namespace detail

}  // namespace fusee::worker
