// actors/rank/exchange_rounds.cpp
#include "actors/rank/exchange_rounds.hpp"

#include <stdexcept>
#include <string>

namespace moe {

round_book::round_book(int64_t self, std::vector<bool> remote) : self_(self), remote_(std::move(remote)) {
  if (self_ < 0 || self_ >= static_cast<int64_t>(remote_.size()))
    throw std::invalid_argument("round_book: rank " + std::to_string(self_) + " outside a group of " +
                                std::to_string(remote_.size()));
  if (remote_[static_cast<size_t>(self_)])
    throw std::invalid_argument("round_book: a rank is not remote to itself");
  for (const bool r : remote_)
    num_remote_ += r ? 1 : 0;
}

std::optional<exchange_round> round_book::stage(ep_payload kind, const ep_key& key, int64_t dest,
                                                std::vector<char> bytes) {
  if (dest < 0 || dest >= static_cast<int64_t>(remote_.size()) || !remote_[static_cast<size_t>(dest)])
    throw std::logic_error("round_book: rank " + std::to_string(dest) + " is not a peer in another process");
  auto [at, fresh] = open_.try_emplace({kind, key});
  open_round& open = at->second;
  if (fresh) {
    open.round = {.kind = kind, .key = key, .to = std::vector<std::vector<char>>(remote_.size())};
    open.staged.assign(remote_.size(), false);
  }
  const auto d = static_cast<size_t>(dest);
  if (open.staged[d])
    throw std::logic_error("round_book: a second payload for rank " + std::to_string(dest) + " in step " +
                           std::to_string(key.step) + " layer " + std::to_string(key.layer_idx));
  open.staged[d] = true;
  open.round.to[d] = std::move(bytes);
  if (++open.count < num_remote_)
    return std::nullopt;
  exchange_round ready = std::move(open.round);
  open_.erase(at);
  return ready;
}

}  // namespace moe
