// What a communicator offers to an agreement vouched for by its caller
// (runtime/agreed_scope.h, docs/collectives.md "Agreement"): the
// collectives' side of the contract, implemented by api::CommunicatorImpl.
#pragma once

namespace kolo::collectives {

// What a communicator offers to AgreedScope (api::CommunicatorImpl).
class AgreementHost {
 public:
  // hold / release: as AgreedScope's constructor and destructor
  // (runtime/agreed_scope.h).
  virtual void holdOperations() = 0;
  virtual void releaseOperations() = 0;
  // Only while held, on the holding thread.
  virtual void setAgreed(bool agreed) = 0;

 protected:
  ~AgreementHost() = default;
};

}  // namespace kolo::collectives
