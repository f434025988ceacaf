// actors/rank/collective_channel.cpp
#include "actors/rank/collective_channel.hpp"

#include <stdexcept>

namespace moe {

collective_channel::collective_channel(round_book book, std::unique_ptr<exchange_engine> engine,
                                       deliver_fn deliver, fail_fn fail)
    : engine_(std::move(engine)), deliver_(std::move(deliver)), fail_(std::move(fail)),
      book_(std::move(book)) {
  thread_ = std::thread([this] { run(); });
}

collective_channel::~collective_channel() { close(); }

void collective_channel::start(std::vector<char> id) {
  {
    std::lock_guard lock{mutex_};
    if (id_ || closed_)
      return;
    id_ = std::move(id);
  }
  wake_.notify_all();
}

void collective_channel::stage(ep_payload kind, const ep_key& key, int64_t dest, std::vector<char> bytes) {
  {
    std::lock_guard lock{mutex_};
    if (closed_)
      return;
    std::optional<exchange_round> round = book_.stage(kind, key, dest, std::move(bytes));
    if (!round)
      return;
    ready_.push_back(std::move(*round));
  }
  wake_.notify_all();
}

void collective_channel::close() {
  {
    std::lock_guard lock{mutex_};
    closed_ = true;
    ready_.clear();
  }
  engine_->abort();
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

collective_stats collective_channel::stats() const {
  std::lock_guard lock{mutex_};
  return stats_;
}

void collective_channel::run() {
  std::vector<char> id;
  {
    std::unique_lock lock{mutex_};
    wake_.wait(lock, [&] { return closed_ || id_; });
    if (closed_)
      return;
    id = *id_;
  }
  std::string failure;
  try {
    if (!engine_->join(id))
      return;  // closed
    joined_.store(true, std::memory_order_release);
    for (;;) {
      exchange_round round;
      {
        std::unique_lock lock{mutex_};
        wake_.wait(lock, [&] { return closed_ || !ready_.empty(); });
        if (closed_)
          return;
        round = std::move(ready_.front());
        ready_.pop_front();
      }
      std::vector<std::vector<char>> from(round.to.size());
      if (!engine_->exchange(round.to, from))
        return;  // closed
      uint64_t sent = 0, received = 0;
      for (size_t r = 0; r < round.to.size(); ++r) {
        sent += round.to[r].size();
        received += from[r].size();
      }
      {
        std::lock_guard lock{mutex_};
        ++stats_.rounds;
        stats_.bytes_sent += sent;
        stats_.bytes_received += received;
      }
      for (size_t r = 0; r < from.size(); ++r)
        if (book_.remote()[r])  // fixed at construction: read without the lock
          deliver_(round.kind, round.key, static_cast<int64_t>(r), from[r]);
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  {
    std::lock_guard lock{mutex_};
    if (closed_)
      return;
    closed_ = true;
    ready_.clear();
  }
  fail_(failure);
}

}  // namespace moe
