// kolo_study_declare (kolo.h): a rank's declaration to kolorun that it runs
// a kolo.hpo study (rendezvous/study_declaration.h), through one store
// connection for the process, opened at the first call.
#include <kolo/kolo.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "capi/capi_internal.h"
#include "common/settings.h"
#include "kolo/error.h"
#include "rendezvous/environment.h"
#include "rendezvous/study_declaration.h"

namespace {

std::mutex gMu;
// guarded by gMu; null until the first call, or when there is no kolorun
std::unique_ptr<kolo::rendezvous::StudyDeclaration> gDeclaration;
bool gChecked = false;  // guarded by gMu

// The declaration's connection; null when the job has no kolorun hosting
// its store: kolorun sets KOLO_RANK and KOLO_RENDEZVOUS and hosts the store
// (no rank does), and its elastic workers have a policy of their own.
kolo::rendezvous::StudyDeclaration* declaration() {
  std::lock_guard<std::mutex> lock(gMu);
  if (!gChecked) {
    gChecked = true;
    const auto job = kolo::rendezvous::detectJobEnvironment();
    if (job.source == "kolo" && !job.hostStore && job.elasticWorker < 0 &&
        !job.rendezvous.empty()) {
      const auto settings = kolo::Settings::fromEnvironment();
      gDeclaration = std::make_unique<kolo::rendezvous::StudyDeclaration>(
          job.rendezvous,
          std::chrono::milliseconds(
              static_cast<int64_t>(settings.connectTimeoutSeconds * 1000)),
          settings.resolveJobSecret(), job.rank);
    }
  }
  return gDeclaration.get();
}

}  // namespace

extern "C" int kolo_study_declare(int inside, int* launcher_told) {
  if (launcher_told != nullptr) *launcher_told = 0;
  try {
    auto* d = declaration();
    if (d == nullptr) return KOLO_OK;
    if (inside) {
      d->enter();
    } else {
      d->leave();
    }
    if (launcher_told != nullptr) *launcher_told = 1;
    return KOLO_OK;
  } catch (const kolo::Error& e) {
    return kolo::capi::fail(static_cast<int>(e.code()),
                            std::string("kolo_study_declare: ") + e.what());
  } catch (const std::exception& e) {
    return kolo::capi::fail(KOLO_ERR_IO, std::string("kolo_study_declare: ") + e.what());
  }
}
