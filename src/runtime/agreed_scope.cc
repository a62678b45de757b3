#include "runtime/agreed_scope.h"

namespace kolo::runtime {

AgreedScope::AgreedScope(Communicator& comm)
    : host_(dynamic_cast<collectives::AgreementHost*>(&comm)) {
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

}  // namespace kolo::runtime
