// The communicator's allreduce selection (collectives/selection.h): the
// scale model with rank 0's constants.
//
// Every rank must decide alike, so the constants are not each rank's own:
// rank 0 reads KOLO_PREDICT_CONSTANTS (or takes the built-in ones) and
// publishes them, exactly as JSON, under the communicator's store prefix;
// the others read them from there. A bad file on rank 0 fails every rank
// with the same error naming it (rank 0 publishes the error instead).
#include "api/communicator_impl.h"
#include "common/check.h"
#include "predict/constants.h"

namespace kolo::api {

void CommunicatorImpl::createSelector(rendezvous::Store& store, const Links& links) {
  const std::string key = "predict/constants";
  constexpr std::string_view kError = "error:";
  std::string text;
  if (topology_.layout.rank == 0) {
    try {
      text = predict::constantsToJson(
          settings_.predictConstants.empty()
              ? predict::builtInConstants()
              : predict::loadConstants(settings_.predictConstants));
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
               "KOLO_PREDICT_CONSTANTS (read by rank 0 for every rank): "
                   << text.substr(kError.size()));
  }
  predict::Constants constants;
  try {
    constants = predict::constantsFromJson(text, "rank 0's constants");
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
  selector_ = std::make_unique<collectives::AllreduceSelector>(
      std::move(constants),
      collectives::shapeOfContext(ctx, intra, inter, topology_.hostOf));
}

}  // namespace kolo::api
