#include "rendezvous/study_declaration.h"

#include <utility>

namespace kolo::rendezvous {

std::string studyKey(int rank) {
  return "kolo.hpo.study/" + std::to_string(rank);
}

bool studyDeclared(Store& store, int rank) {
  return store.add(studyKey(rank), 0) > 0;
}

StudyDeclaration::StudyDeclaration(std::string address,
                                   std::chrono::milliseconds connectTimeout,
                                   std::string secret, int rank)
    : address_(std::move(address)),
      connectTimeout_(connectTimeout),
      secret_(std::move(secret)),
      rank_(rank) {}

int64_t StudyDeclaration::add(int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    if (!store_) store_ = openStore(address_, false, connectTimeout_, secret_);
    return store_->add(studyKey(rank_), delta);
  } catch (...) {
    store_.reset();
    throw;
  }
}

}  // namespace kolo::rendezvous
