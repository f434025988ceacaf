// actors/rank/expert_fetch.cpp
#include "actors/rank/expert_fetch.hpp"

#include <stdexcept>

namespace moe {

std::string expert_fetch_error(const expert_fetch& f, const std::string& why) {
  return "expert " + std::to_string(f.expert) + " of layer " + std::to_string(f.layer) + " from rank " +
         std::to_string(f.holder) + ": " + why;
}

std::shared_ptr<const expert_copy> expert_from_blob(const expert_fetch& f, const expert_blob& blob,
                                                    std::string& error) {
  if (blob.layer != f.layer || blob.expert != f.expert) {
    error = expert_fetch_error(f, "got expert " + std::to_string(blob.expert) + " of layer " +
                                    std::to_string(blob.layer));
    return nullptr;
  }
  try {
    return decode_expert(blob.bytes);
  } catch (const std::invalid_argument& e) {
    error = expert_fetch_error(f, e.what());
    return nullptr;
  }
}

}  // namespace moe
