// device_path_check: on a machine with a GPU, which device path a job
// gets (CommunicatorImpl::deviceCollectives) and every collective through
// it, element by element against kolo's CPU kernels (support/
// device_checks.h), on device memory and the legacy default stream.
//
//   kolorun -np N device_path_check [--expect TEXT | --expect-error PART]
//                                   [--hosts H] [--device D]
//
// --expect: the path must be TEXT (devicePathText(), e.g. "ipc", "nccl",
// "hier (ipc inside hosts, tcp between)"); --expect-error: choosing must
// fail on every rank with a message containing PART; --hosts H puts the
// ranks on H pretend hosts (KOLO_HOST_ID "pretend<rank * H / N>", from
// KOLO_RANK and KOLO_SIZE). Each rank prints its path; rank 0 prints
// "device_path_check PASS|FAIL path '<text>' ..." and every rank exits 1
// when any failed. Without a GPU it prints the staged choice and exits 0
// when that is what was expected.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "api/communicator_impl.h"
#include "collectives/cuda/device_runtime.h"
#include "support/device_checks.h"

namespace {

using kolo::collectives::cuda::DeviceBuffer;

struct Args {
  std::string expect;
  std::string expectError;
  int hosts = 0;
  int device = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--expect") {
      a.expect = argv[i + 1];
    } else if (k == "--expect-error") {
      a.expectError = argv[i + 1];
    } else if (k == "--hosts") {
      a.hosts = std::atoi(argv[i + 1]);
    } else if (k == "--device") {
      a.device = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "device_path_check: unknown argument %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

void pretendHosts(int hosts) {
  const char* rank = std::getenv("KOLO_RANK");
  const char* size = std::getenv("KOLO_SIZE");
  if (hosts <= 0 || rank == nullptr || size == nullptr) return;
  const int host = std::atoi(rank) * hosts / std::max(1, std::atoi(size));
  setenv("KOLO_HOST_ID", ("pretend" + std::to_string(host)).c_str(), 1);
}

// Every collective through `paths`, on two device buffers.
bool runCollectives(kolo::collectives::cuda::DeviceCollectives* paths, int device,
                    int rank, int size) {
  // Never freed: CUDA IPC peers map them until their path ends at shutdown,
  // and freeing memory a peer still maps is undefined (docs/gpu_paths.md);
  // the process's end frees them.
  DeviceBuffer& a = *new DeviceBuffer(kolo::test::kRigBufferBytes, device);
  DeviceBuffer& b = *new DeviceBuffer(kolo::test::kRigBufferBytes, device);
  kolo::test::Rig rig;
  rig.paths = paths;
  rig.buf[0] = a.data();
  rig.buf[1] = b.data();
  rig.put = [&](int i, const std::vector<uint8_t>& bytes) {
    kolo::collectives::cuda::synchronize(nullptr);
    (i == 0 ? a : b).upload(bytes.data(), bytes.size());
  };
  rig.get = [&](int i) {
    kolo::collectives::cuda::synchronize(nullptr);
    std::vector<uint8_t> out(kolo::test::kRigBufferBytes);
    (i == 0 ? a : b).download(out.data(), out.size());
    return out;
  };
  return kolo::test::checkAll(rig, rank, size);
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  pretendHosts(args.hosts);
  auto comm = kolo::api::CommunicatorImpl::fromEnvironment();
  const int rank = comm->rank();
  kolo::collectives::cuda::DeviceCollectives* paths = nullptr;
  std::string error;
  try {
    paths = comm->deviceCollectives(args.device);
  } catch (const kolo::Error& e) {
    error = e.what();
  }
  const std::string text = comm->devicePathText();
  std::printf("device_path_check: rank %d path '%s'%s%s\n", rank, text.c_str(),
              error.empty() ? "" : " error: ", error.c_str());
  bool ok = true;
  if (!args.expectError.empty()) {
    ok = error.find(args.expectError) != std::string::npos;
  } else {
    ok = error.empty() && (args.expect.empty() || text == args.expect);
  }
  try {
    if (paths != nullptr)
      ok = runCollectives(paths, args.device, rank, comm->size()) && ok;
  } catch (const kolo::Error& e) {
    std::printf("device_path_check: rank %d collective failed: %s\n", rank, e.what());
    ok = false;
  }
  int failed = ok ? 0 : 1;
  kolo::AllreduceOptions o;
  o.send = o.recv = &failed;
  o.count = 1;
  o.dtype = kolo::DataType::kInt32;
  comm->allreduce(o);
  if (rank == 0) {
    std::printf("device_path_check %s path '%s' %d ranks, %d failed%s\n",
                failed == 0 ? "PASS" : "FAIL", text.c_str(), comm->size(), failed,
                paths != nullptr ? ", every collective checked" : "");
  }
  std::fflush(stdout);
  comm->shutdown();
  return failed == 0 ? 0 : 1;
}
