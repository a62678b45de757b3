// The communicator's allreduce selection (collectives/selection.h): the
// scale model with rank 0's constants, link rate and cores.
//
// Every rank must decide alike, so the constants are not each rank's own:
// rank 0 reads KOLO_PREDICT_CONSTANTS (or takes the built-in ones),
// KOLO_LINK_RATE, KOLO_HOST_CORES, KOLO_HOSTS_SHARE_CORES and KOLO_SPIN_US
// and publishes them under the communicator's store prefix, as a first
// line "link_bps <bits/s> cores <n> share <0|1> spin_s <seconds>" and the
// constants' JSON after it; the others read them from there. A bad file or rate on rank 0
// fails every rank with the same error naming it (rank 0 publishes the error instead).
#include <sstream>

#include "api/communicator_impl.h"
#include "common/check.h"
#include "predict/constants.h"
#include "predict/units.h"

namespace kolo::api {

void CommunicatorImpl::createSelector(rendezvous::Store& store, const Links& links) {
  const std::string key = "predict/constants";
  constexpr std::string_view kError = "error:";
  std::string text;
  if (topology_.layout.rank == 0) {
    try {
      const double linkBps =
          settings_.linkRate.empty()
              ? 0.0
              : predict::parseRate("KOLO_LINK_RATE", settings_.linkRate);
      std::ostringstream os;
      os.precision(17);
      if (settings_.hostCores < 0) {
        throw std::invalid_argument(
            "KOLO_HOST_CORES=" + std::to_string(settings_.hostCores) +
            ": expected a count of cores (0: a core per rank)");
      }
      os << "link_bps " << linkBps << " cores " << settings_.hostCores << " share "
         << (settings_.hostsShareCores != 0 ? 1 : 0) << " spin_s "
         << settings_.spinMicros * 1e-6 << "\n"
         << predict::constantsToJson(
                settings_.predictConstants.empty()
                    ? predict::builtInConstants()
                    : predict::loadConstants(settings_.predictConstants));
      text = os.str();
    } catch (const std::exception& e) {
      text = std::string(kError) + e.what();
    }
    store.setString(key, text);
  } else {
    text = store.getString(key, std::chrono::milliseconds(static_cast<int64_t>(
                                    settings_.connectTimeoutSeconds * 1000.0)));
  }
  if (text.rfind(kError, 0) == 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_PREDICT_CONSTANTS / KOLO_LINK_RATE / KOLO_HOST_CORES (read by rank "
               "0 for every rank): "
                   << text.substr(kError.size()));
  }
  predict::Constants constants;
  double linkBps = 0, spin = 0;
  int cores = 0, share = 0;
  try {
    const size_t eol = text.find('\n');
    std::istringstream head(text.substr(0, eol == std::string::npos ? 0 : eol));
    std::string k1, k2, k3, k4;
    if (!(head >> k1 >> linkBps >> k2 >> cores >> k3 >> share >> k4 >> spin) ||
        k1 != "link_bps" || k2 != "cores" || k3 != "share" || k4 != "spin_s") {
      throw std::invalid_argument("no 'link_bps .. cores .. share .. spin_s ..' line");
    }
    constants = predict::constantsFromJson(text.substr(eol + 1), "rank 0's constants");
  } catch (const std::exception& e) {
    KOLO_THROW(ErrorCode::kInternal,
               "the scale model's constants from rank 0: " << e.what());
  }
  const std::string& mode = settings_.transport;
  const predict::Path intra = mode == "tcp"   ? predict::Path::kTcp
                              : mode == "mpi" ? predict::Path::kMpi
                                              : predict::Path::kShm;
  const predict::Path inter = links.mpi ? predict::Path::kMpi : predict::Path::kTcp;
  collectives::Context ctx{*world_, topology_.layout};
  ctx.local = local_.get();
  ctx.cross = cross_.get();
  ctx.shm = shm_.get();
  predict::JobShape shape =
      collectives::shapeOfContext(ctx, intra, inter, topology_.hostOf);
  shape.linkBps = linkBps;
  shape.coresPerHost = cores;
  shape.hostsShareCores = share != 0;
  shape.spinSeconds = spin;
  selector_ = std::make_unique<collectives::AllreduceSelector>(std::move(constants),
                                                               std::move(shape));
}

}  // namespace kolo::api
