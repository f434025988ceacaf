// actors/rank/ep_inbox.cpp
#include "actors/rank/ep_inbox.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

namespace moe {

template <class Payload>
bool ep_inbox::put_into(std::map<ep_key, slot<Payload>>& slots, std::shared_ptr<const Payload> p,
                        clock::time_point at) {
  bool not_begun = false;
  {
    std::lock_guard lock(mutex_);
    if (cancelled_ || p->key.step < floor_)
      return false;
    not_begun = p->key.step >= next_step_;
    slot<Payload>& s = slots[p->key];
    s.arrives = std::max(s.arrives, at);
    s.payloads.push_back(std::move(p));
  }
  arrived_.notify_all();
  return not_begun;
}

bool ep_inbox::put(std::shared_ptr<const ep_dispatch> d, clock::time_point at) {
  return put_into(dispatches_, std::move(d), at);
}

bool ep_inbox::put(std::shared_ptr<const ep_combine> c, clock::time_point at) {
  return put_into(combines_, std::move(c), at);
}

void ep_inbox::begin_step(int64_t step) {
  std::lock_guard lock(mutex_);
  next_step_ = std::max(next_step_, step + 1);
}

bool ep_inbox::has_step(int64_t step) const {
  std::lock_guard lock(mutex_);
  const auto it = dispatches_.lower_bound(ep_key{.step = step,
                                                 .layer_idx = std::numeric_limits<int64_t>::min(),
                                                 .micro_batch = std::numeric_limits<int64_t>::min()});
  return it != dispatches_.end() && it->first.step == step;
}

int64_t ep_inbox::count_of(const stage_input& in, clock::time_point* arrives) const {
  const auto count = [&](const auto& slots) -> int64_t {
    const auto it = slots.find(in.key);
    if (it == slots.end())
      return 0;
    if (arrives)
      *arrives = it->second.arrives;
    return static_cast<int64_t>(it->second.payloads.size());
  };
  return in.kind == ep_payload::dispatch ? count(dispatches_) : count(combines_);
}

bool ep_inbox::complete(const stage_input& in) const {
  std::lock_guard lock(mutex_);
  return count_of(in, nullptr) >= in.count;
}

void ep_inbox::wait(const stage_input& in) {
  std::unique_lock lock(mutex_);
  clock::time_point arrives;
  const auto given_up = [&] { return cancelled_.load() || abandoned(in.key.step); };
  const auto ready = [&] { return given_up() || count_of(in, &arrives) >= in.count; };
  if (!ready()) {  // blocked on peers: the watchdog reads for how long
    waiting_since_.store(clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    arrived_.wait(lock, ready);
    waiting_since_.store(std::numeric_limits<clock::rep>::min(), std::memory_order_relaxed);
  }
  // The payloads are here; the link model says when the last of them is. Sleep until shortly
  // before, then spin (yielding the core): a sleeping thread wakes a median 90-150 us late on
  // this VM, against decode stages of 0.1-2 ms.
  arrived_.wait_until(lock, arrives - spin_before_arrival, given_up);
  const auto check = [&] {
    if (cancelled_.load(std::memory_order_relaxed))
      throw std::runtime_error("the rank stopped while a stage waited for its peers");
    if (abandoned(in.key.step))
      throw std::runtime_error("the step was abandoned: a peer of the group was restarted");
  };
  check();
  lock.unlock();
  while (clock::now() < arrives && !cancelled_.load(std::memory_order_relaxed) && !abandoned(in.key.step))
    std::this_thread::yield();
  check();
}

void ep_inbox::start_epoch(int64_t first_step) {
  {
    std::lock_guard lock(mutex_);
    if (first_step <= floor_)
      return;
    floor_ = first_step;
    next_step_ = std::max(next_step_, first_step);
    const auto drop_below = [first_step](auto& slots) {
      slots.erase(slots.begin(),
                  slots.lower_bound(ep_key{.step = first_step,
                                           .layer_idx = std::numeric_limits<int64_t>::min(),
                                           .micro_batch = std::numeric_limits<int64_t>::min()}));
    };
    drop_below(dispatches_);
    drop_below(combines_);
  }
  arrived_.notify_all();
}

template <class Payload>
std::vector<std::shared_ptr<const Payload>> ep_inbox::take_from(std::map<ep_key, slot<Payload>>& slots,
                                                                const ep_key& key, int64_t count,
                                                                const char* what) {
  std::lock_guard lock(mutex_);
  const auto it = slots.find(key);
  const int64_t here = it == slots.end() ? 0 : static_cast<int64_t>(it->second.payloads.size());
  if (here != count)
    throw std::logic_error(std::string("ep_inbox: ") + std::to_string(here) + " " + what + " for step " +
                           std::to_string(key.step) + " layer " + std::to_string(key.layer_idx) +
                           " micro-batch " + std::to_string(key.micro_batch) + ", expected " +
                           std::to_string(count));
  std::vector<std::shared_ptr<const Payload>> out = std::move(it->second.payloads);
  slots.erase(it);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->src_rank < b->src_rank; });
  return out;
}

std::vector<std::shared_ptr<const ep_dispatch>> ep_inbox::take_dispatches(const ep_key& key, int64_t count) {
  return take_from(dispatches_, key, count, "dispatches");
}

std::vector<std::shared_ptr<const ep_combine>> ep_inbox::take_combines(const ep_key& key, int64_t count) {
  return take_from(combines_, key, count, "combines");
}

ep_inbox::clock::duration ep_inbox::waiting_for(clock::time_point now) const {
  const clock::rep since = waiting_since_.load(std::memory_order_relaxed);
  if (since == std::numeric_limits<clock::rep>::min())
    return clock::duration::zero();
  return std::max(clock::duration::zero(), now - clock::time_point(clock::duration(since)));
}

void ep_inbox::hang_until_cancelled() {
  std::unique_lock lock(mutex_);
  arrived_.wait(lock, [&] { return cancelled_.load(); });
}

void ep_inbox::cancel() {
  {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    dispatches_.clear();
    combines_.clear();
  }
  arrived_.notify_all();
}

bool ep_inbox::cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

}  // namespace moe
