// kolo_elastic_world and kolo_elastic_host_updates (kolo.h): kolo_init's
// world's elastic generation (Communicator::elasticWorld) and the
// launcher's host-update counters (rendezvous/host_updates.h), read through
// one connection for the process, opened at the first call.
#include <kolo/kolo.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "capi/capi_internal.h"
#include "common/settings.h"
#include "kolo/error.h"
#include "rendezvous/environment.h"
#include "rendezvous/host_updates.h"

namespace {

std::mutex gMu;
std::unique_ptr<kolo::rendezvous::elastic::HostUpdates> gUpdates;  // guarded by gMu

kolo::rendezvous::elastic::HostUpdates& launcherCounters() {
  std::lock_guard<std::mutex> lock(gMu);
  if (!gUpdates) {
    const auto settings = kolo::Settings::fromEnvironment();
    gUpdates = std::make_unique<kolo::rendezvous::elastic::HostUpdates>(
        kolo::rendezvous::detectJobEnvironment().rendezvous,
        std::chrono::milliseconds(
            static_cast<int64_t>(settings.connectTimeoutSeconds * 1000)),
        settings.resolveJobSecret());
  }
  return *gUpdates;
}

// kolo_init's world's; generation 0 before kolo_init or outside an elastic
// job.
kolo::ElasticWorld currentWorld() {
  const auto world = kolo::capi::world();
  return world ? world->elasticWorld() : kolo::ElasticWorld{};
}

}  // namespace

extern "C" int kolo_elastic_world(int64_t* generation, int64_t* updates,
                                  int64_t* additions) {
  if (generation == nullptr || updates == nullptr || additions == nullptr) {
    return kolo::capi::fail(KOLO_ERR_INVALID_ARGUMENT,
                            "kolo_elastic_world: null output pointer");
  }
  const kolo::ElasticWorld world = currentWorld();
  *generation = world.generation;
  *updates = world.hostUpdates;
  *additions = world.hostAdditions;
  return KOLO_OK;
}

extern "C" int kolo_elastic_host_updates(int64_t* updates, int64_t* additions) {
  if (updates == nullptr || additions == nullptr) {
    return kolo::capi::fail(KOLO_ERR_INVALID_ARGUMENT,
                            "kolo_elastic_host_updates: null output pointer");
  }
  *updates = *additions = 0;
  // Not an elastic job (or not initialized yet).
  if (currentWorld().generation == 0) return KOLO_OK;
  try {
    const auto counts = launcherCounters().read();
    *updates = counts.updates;
    *additions = counts.additions;
    return KOLO_OK;
  } catch (const kolo::Error& e) {
    return kolo::capi::fail(static_cast<int>(e.code()),
                            std::string("kolo_elastic_host_updates: ") + e.what());
  } catch (const std::exception& e) {
    return kolo::capi::fail(KOLO_ERR_IO,
                            std::string("kolo_elastic_host_updates: ") + e.what());
  }
}
