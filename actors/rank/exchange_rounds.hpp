// actors/rank/exchange_rounds.hpp
// A collective transport (NCCL) moves a rank's expert-parallel payloads in rounds: every rank of
// the group enters the same exchange in the same order, each sending one payload to every peer in
// another process and receiving one from each. The order comes free: every rank runs the same
// stream program (step_pipeline.cpp), and a stage sends all its payloads of one key, to every
// peer, before the next stage runs (a failed stage still sends). The book below gathers a rank's
// sends into rounds as the stream makes them; a round is ready when every remote peer has its
// payload. CAF-free and pure: the channel (collective_channel.hpp) runs the rounds.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "actors/rank/ep_inbox.hpp"

namespace moe {

/// One exchange: the bytes this rank sends each group rank (empty for itself and for peers in
/// its own process, which take payloads from their inbox).
struct exchange_round {
  ep_payload kind = ep_payload::dispatch;
  ep_key key;
  std::vector<std::vector<char>> to;  // per group rank
};

class round_book {
 public:
  /// A group of `remote.size()` ranks; `remote[r]`: rank r is in another process (this rank's
  /// own entry is false). Throws std::invalid_argument for a self outside the group or a self
  /// marked remote.
  round_book(int64_t self, std::vector<bool> remote);

  /// The payload of `kind` and `key` for `dest`, serialized. Returns the round once every
  /// remote peer has its payload of that kind and key. Throws std::logic_error for a dest that
  /// is not remote, or a second payload for the same dest in one round: the rounds would no
  /// longer match the peers'.
  [[nodiscard]] std::optional<exchange_round> stage(ep_payload kind, const ep_key& key, int64_t dest,
                                                    std::vector<char> bytes);

  [[nodiscard]] int64_t self() const noexcept { return self_; }
  [[nodiscard]] const std::vector<bool>& remote() const noexcept { return remote_; }
  /// Remote peers: the payloads a round holds.
  [[nodiscard]] int64_t num_remote() const noexcept { return num_remote_; }
  /// Rounds begun and not yet ready.
  [[nodiscard]] size_t open_rounds() const noexcept { return open_.size(); }

 private:
  struct open_round {
    exchange_round round;
    std::vector<bool> staged;  // per group rank
    int64_t count = 0;
  };

  int64_t self_;
  std::vector<bool> remote_;
  int64_t num_remote_ = 0;
  std::map<std::pair<ep_payload, ep_key>, open_round> open_;
};

}  // namespace moe
