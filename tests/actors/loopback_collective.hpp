// tests/actors/loopback_collective.hpp
// A collective transport inside one process, for tests of the NCCL path's policy without a GPU:
// the engines of one id meet at a hub, and each round is an all-to-all among them (an engine's
// exchange waits until every engine of its group has put its round's bytes there), as grouped
// ncclSend/ncclRecv are. It counts the rounds it ran, so a test sees the path was taken.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/rank/collective_channel.hpp"

namespace moe::testing {

struct loopback_hub {
  struct group {
    size_t joined = 0;
    // per round: what each rank sent each rank, how many put theirs, how many took theirs
    std::map<int64_t, std::vector<std::vector<std::vector<char>>>> sent;
    std::map<int64_t, size_t> put, taken;
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, group> groups;
  std::atomic<uint64_t> exchanges{0};  // one per engine and round
};

class loopback_engine final : public exchange_engine {
 public:
  loopback_engine(std::shared_ptr<loopback_hub> hub, int64_t rank, std::vector<bool> remote)
      : hub_(std::move(hub)), rank_(static_cast<size_t>(rank)), remote_(std::move(remote)) {}

  bool join(const std::vector<char>& id) override {
    std::unique_lock lock{hub_->mutex};
    id_.assign(id.begin(), id.end());
    loopback_hub::group& g = hub_->groups[id_];
    ++g.joined;
    hub_->changed.notify_all();
    hub_->changed.wait(lock, [&] { return aborted_ || g.joined == remote_.size(); });
    return !aborted_;
  }

  bool exchange(const std::vector<std::vector<char>>& to, std::vector<std::vector<char>>& from) override {
    const size_t n = remote_.size();
    const int64_t round = next_round_++;
    std::unique_lock lock{hub_->mutex};
    loopback_hub::group& g = hub_->groups.at(id_);
    auto& sent = g.sent[round];
    sent.resize(n);
    sent[rank_] = to;
    ++g.put[round];
    hub_->changed.notify_all();
    hub_->changed.wait(lock, [&] { return aborted_ || g.put[round] == n; });
    if (aborted_)
      return false;
    for (size_t r = 0; r < n; ++r)
      if (remote_[r])
        from[r] = sent[r][rank_];
    if (++g.taken[round] == n) {
      g.sent.erase(round);
      g.put.erase(round);
      g.taken.erase(round);
    }
    ++hub_->exchanges;
    return true;
  }

  void abort() override {
    std::lock_guard lock{hub_->mutex};
    aborted_ = true;
    hub_->changed.notify_all();
  }

 private:
  std::shared_ptr<loopback_hub> hub_;
  size_t rank_;
  std::vector<bool> remote_;
  std::string id_;
  int64_t next_round_ = 0;
  bool aborted_ = false;  // under the hub's mutex
};

class loopback_transport final : public collective_transport {
 public:
  [[nodiscard]] std::string name() const override { return "loopback"; }
  [[nodiscard]] std::vector<char> make_id() override {
    const std::string id = "group-" + std::to_string(next_id_++);
    return {id.begin(), id.end()};
  }
  [[nodiscard]] std::unique_ptr<exchange_engine> engine(int64_t /*global_rank*/, int64_t rank,
                                                        const std::vector<bool>& remote) override {
    return std::make_unique<loopback_engine>(hub, rank, remote);
  }
  [[nodiscard]] uint64_t exchanges() const { return hub->exchanges.load(); }

  std::shared_ptr<loopback_hub> hub = std::make_shared<loopback_hub>();

 private:
  std::atomic<int> next_id_{0};
};

}  // namespace moe::testing
