// actors/rank/collective_channel.hpp
// The GPU path of the expert-parallel exchange between processes: a collective transport (NCCL)
// that every rank of a group enters together, round by round (exchange_rounds.hpp says why the
// rounds line up). Group rank 0 makes the communicator's id, actor messages carry it to the other
// ranks (ep_rank_core::set_membership), and each rank's channel joins with it on a thread of its
// own, which then runs the rounds in the order they became ready: sizes first, then the bytes, as
// grouped sends and receives on a communication stream, and gives each arrival to the rank. A
// membership change closes the channel: the engine aborts what is under way (a dead peer never
// enters its round) and the new membership gets a new communicator. CAF-free.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/rank/exchange_rounds.hpp"

namespace moe {

/// What carries one rank's rounds: NCCL (nccl_transport.hpp) or, in tests, a hub in one process.
class exchange_engine {
 public:
  virtual ~exchange_engine() = default;
  /// Joins the communicator that `id` names (group rank 0's make_id). Blocks until every rank
  /// joined: true, or false once abort() was called. Throws std::runtime_error where it fails.
  virtual bool join(const std::vector<char>& id) = 0;
  /// Sends to[r] to each remote rank r and receives from[r] from each (the others stay empty):
  /// true, or false once abort() was called. Throws std::runtime_error where it fails.
  virtual bool exchange(const std::vector<std::vector<char>>& to, std::vector<std::vector<char>>& from) = 0;
  /// From any thread: join and exchange give up, now or when they next wait.
  virtual void abort() = 0;
};

/// Makes a process's engines.
class collective_transport {
 public:
  virtual ~collective_transport() = default;
  /// "NCCL", for logs.
  [[nodiscard]] virtual std::string name() const = 0;
  /// A fresh communicator id.
  [[nodiscard]] virtual std::vector<char> make_id() = 0;
  /// An engine for group rank `rank` (of global rank `global_rank`, which picks its device);
  /// `remote[r]`: group rank r is in another process.
  [[nodiscard]] virtual std::unique_ptr<exchange_engine> engine(int64_t global_rank, int64_t rank,
                                                                const std::vector<bool>& remote) = 0;
};

/// What a channel moved.
struct collective_stats {
  uint64_t rounds = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

class collective_channel {
 public:
  /// A payload of `kind` from group rank `from`, in the round of `key` (on the channel's thread).
  using deliver_fn =
    std::function<void(ep_payload kind, const ep_key& key, int64_t from, const std::vector<char>& bytes)>;
  /// The channel stopped for `why` (joining or a round failed, not a close): its rounds are lost,
  /// and the rank must leave its group so the others renew it (on the channel's thread).
  using fail_fn = std::function<void(const std::string& why)>;

  collective_channel(round_book book, std::unique_ptr<exchange_engine> engine, deliver_fn deliver,
                     fail_fn fail);
  ~collective_channel();
  collective_channel(const collective_channel&) = delete;
  collective_channel& operator=(const collective_channel&) = delete;

  /// Joins with the communicator id (the first call counts).
  void start(std::vector<char> id);
  /// A payload for a remote peer, from the rank's stream (round_book::stage).
  void stage(ep_payload kind, const ep_key& key, int64_t dest, std::vector<char> bytes);
  /// Aborts what is under way and waits for the thread; rounds not run are dropped.
  void close();

  [[nodiscard]] collective_stats stats() const;
  [[nodiscard]] bool joined() const noexcept { return joined_.load(std::memory_order_acquire); }

 private:
  void run();

  std::unique_ptr<exchange_engine> engine_;
  deliver_fn deliver_;
  fail_fn fail_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  round_book book_;                   // under mutex_
  std::deque<exchange_round> ready_;  // likewise
  std::optional<std::vector<char>> id_;
  bool closed_ = false;
  collective_stats stats_;
  std::atomic<bool> joined_{false};
  std::thread thread_;
};

}  // namespace moe
