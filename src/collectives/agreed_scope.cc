#include "collectives/agreed_scope.h"

namespace kolo::collectives {

AgreedScope::AgreedScope(Communicator& comm)
    : host_(dynamic_cast<AgreementHost*>(&comm)) {
  if (host_ != nullptr) host_->holdOperations();
}

AgreedScope::~AgreedScope() {
  if (host_ == nullptr) return;
  host_->setAgreed(false);
  host_->releaseOperations();
}

void AgreedScope::agreedFromHere() {
  if (host_ != nullptr) host_->setAgreed(true);
}

}  // namespace kolo::collectives
