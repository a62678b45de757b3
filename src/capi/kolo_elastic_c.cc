// kolo_elastic_world and kolo_elastic_host_updates (kolo.h): this process's
// elastic world and the launcher's host-update counters
// (rendezvous/elastic_membership.h). The store is reached through a
// connection of its own, opened at the first call and kept (one round trip
// per call after that).
#include <kolo/kolo.h>

#include <chrono>
#include <memory>
#include <mutex>

#include "capi/capi_internal.h"
#include "common/settings.h"
#include "kolo/error.h"
#include "rendezvous/elastic_membership.h"
#include "rendezvous/environment.h"
#include "rendezvous/store.h"

namespace {

namespace elastic = kolo::rendezvous::elastic;

std::mutex gMu;
std::unique_ptr<kolo::rendezvous::Store> gStore;  // guarded by gMu

kolo::rendezvous::Store& launcherStore() {
  if (!gStore) {
    const auto settings = kolo::Settings::fromEnvironment();
    const auto env = kolo::rendezvous::detectJobEnvironment();
    gStore = kolo::rendezvous::openStore(env.rendezvous, false,
                                         std::chrono::milliseconds(static_cast<int64_t>(
                                             settings.connectTimeoutSeconds * 1000)),
                                         settings.resolveJobSecret());
  }
  return *gStore;
}

}  // namespace

extern "C" int kolo_elastic_world(int64_t* generation, int64_t* updates,
                                  int64_t* additions) {
  if (generation == nullptr || updates == nullptr || additions == nullptr) {
    return kolo::capi::fail(KOLO_ERR_INVALID_ARGUMENT,
                            "kolo_elastic_world: null output pointer");
  }
  const auto world = elastic::currentWorld();
  *generation = world ? world->generation : 0;
  *updates = world ? world->hostUpdates : 0;
  *additions = world ? world->hostAdditions : 0;
  return KOLO_OK;
}

extern "C" int kolo_elastic_host_updates(int64_t* updates, int64_t* additions) {
  if (updates == nullptr || additions == nullptr) {
    return kolo::capi::fail(KOLO_ERR_INVALID_ARGUMENT,
                            "kolo_elastic_host_updates: null output pointer");
  }
  *updates = *additions = 0;
  const auto world = elastic::currentWorld();
  if (!world) return KOLO_OK;  // not an elastic job (or not initialized yet)
  std::lock_guard<std::mutex> lock(gMu);
  try {
    auto& store = launcherStore();
    *updates = store.add(elastic::kHostUpdatesKey, 0);
    *additions = store.add(elastic::kHostAdditionsKey, 0);
    return KOLO_OK;
  } catch (const kolo::Error& e) {
    gStore.reset();
    return kolo::capi::fail(static_cast<int>(e.code()),
                            std::string("kolo_elastic_host_updates: ") + e.what());
  } catch (const std::exception& e) {
    gStore.reset();
    return kolo::capi::fail(KOLO_ERR_IO,
                            std::string("kolo_elastic_host_updates: ") + e.what());
  }
}
