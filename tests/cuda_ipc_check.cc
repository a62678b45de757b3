// The CUDA IPC collectives (collectives/cuda/ipc_collectives.h) between the
// ranks of this host, element by element against kolo's host collectives:
//
//   kolorun -np 2 build/bin/cuda_ipc_check --device=host   # host double
//   kolorun -np 3 build/bin/cuda_ipc_check --device=cuda   # the GPU(s)
//   kolorun -np 2 build/bin/cuda_ipc_check --device=cuda --bench
//
// --device=host runs the real protocol between these processes over the
// test double of the device (tests/support/ipc_host_device.h); CTest runs
// it with 2 and 3 ranks. --device=cuda runs it on CUDA device
// (local rank % device count), the ranks sharing a GPU when there is one;
// without a device every rank prints "SKIP: ..." and exits 0.
//
// Checks: allreduce (every dtype and op, in place and not, 1 / 1037 /
// 70001 elements), broadcast from every root, allgather with uneven counts
// (one rank 0) in place and not, reduceScatter with uneven counts (every
// dtype and op), alltoall with uneven splits, and memory that cannot be
// exported (host double: heap memory; CUDA: cudaMallocAsync pool memory),
// and the allreduces again with IpcOptions::oneWriter.
// With CUDA also the reduceToMany kernel against the CPU kernels on
// random values with NaN, infinities and subnormals (one rank).
// --bench (CUDA): 256 MiB float32 allreduce through IPC against the
// device's own device-to-device cudaMemcpy of the same buffer, a line
// "bench slices ranks=N ipc_allreduce_GBps=... d2d_copy_GBps=... ratio=..."
// (rank 0), then the same with IpcOptions::oneWriter ("bench one_writer").
//
// Exit status 0 when every check of every rank passed (the ranks agree
// through a host allreduce of their failure counts), 1 otherwise.
#include <kolo/communicator.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/ipc_collectives.h"
#include "common/settings.h"
#include "rendezvous/environment.h"
#include "rendezvous/store.h"
#include "support/ipc_check_memory.h"

namespace {

using namespace kolo;
namespace cuda = kolo::collectives::cuda;
using test::CheckMemory;
using Bytes = std::vector<uint8_t>;

const DataType kDtypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                            DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                            DataType::kUInt8};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                         ReduceOp::kMax, ReduceOp::kProduct};

struct Checker {
  Communicator& host;
  cuda::DeviceCollectives& ipc;
  CheckMemory& memory;
  int rank = 0;
  int size = 1;
  int checks = 0;
  int failures = 0;

  void expectSame(const Bytes& want, const Bytes& got, DataType dtype,
                  const std::string& what) {
    ++checks;
    const size_t es = elementSize(dtype);
    for (size_t i = 0; i < want.size(); i += es) {
      if (std::memcmp(&want[i], &got[i], es) == 0) continue;
      ++failures;
      std::printf("rank %d FAIL %s: element %zu differs from the host collective\n", rank,
                  what.c_str(), i / es);
      return;
    }
  }

  static std::string name(const char* c, DataType d, ReduceOp op, size_t count,
                          bool inPlace) {
    return std::string(c) + " " + std::string(toString(d)) + " " +
           std::string(toString(op)) + " count " + std::to_string(count) +
           (inPlace ? " in place" : "");
  }

  void allreduce(DataType d, ReduceOp op, size_t count, bool inPlace, bool exportable) {
    const size_t bytes = count * elementSize(d);
    const Bytes input = test::smallValues(d, count, rank, 1);
    Bytes want = input;
    AllreduceOptions o;
    o.send = o.recv = want.data();
    o.count = count;
    o.dtype = d;
    o.op = op;
    host.allreduce(o);
    void* send = memory.alloc(bytes, exportable);
    void* recv = inPlace ? send : memory.alloc(bytes, exportable);
    memory.upload(send, input.data(), bytes);
    ipc.allreduce(send, recv, count, d, op, memory.stream());
    expectSame(want, memory.download(recv, bytes), d,
               name(exportable ? "allreduce" : "allreduce (not exportable)", d, op, count,
                    inPlace));
    memory.freeAll();
  }

  void broadcast(DataType d, int root) {
    const size_t count = 1001;
    const size_t bytes = count * elementSize(d);
    Bytes want = test::smallValues(d, count, rank, 2);
    void* buf = memory.alloc(bytes, true);
    memory.upload(buf, want.data(), bytes);
    BroadcastOptions o;
    o.buffer = want.data();
    o.count = count;
    o.dtype = d;
    o.root = root;
    host.broadcast(o);
    ipc.broadcast(buf, count, d, root, memory.stream());
    expectSame(want, memory.download(buf, bytes), d,
               "broadcast " + std::string(toString(d)) + " root " + std::to_string(root));
    memory.freeAll();
  }

  void allgather(DataType d, bool inPlace, bool exportable) {
    std::vector<size_t> counts(size);
    for (int r = 0; r < size; ++r) counts[r] = r == 1 ? 0 : 50 * (r + 1) + 3;
    size_t total = 0, offset = 0;
    for (int r = 0; r < size; ++r) {
      if (r == rank) offset = total;
      total += counts[r];
    }
    const size_t es = elementSize(d);
    const Bytes input = test::smallValues(d, counts[rank], rank, 3);
    Bytes want(total * es);
    AllgatherOptions o;
    o.send = input.data();
    o.recv = want.data();
    o.counts = counts;
    o.dtype = d;
    host.allgather(o);
    void* recv = memory.alloc(total * es, exportable);
    void* send = inPlace ? static_cast<uint8_t*>(recv) + offset * es
                         : memory.alloc(counts[rank] * es + 1, exportable);
    if (counts[rank] != 0) memory.upload(send, input.data(), counts[rank] * es);
    ipc.allgather(send, recv, counts, d, memory.stream());
    expectSame(want, memory.download(recv, total * es), d,
               std::string("allgather ") + std::string(toString(d)) +
                   (inPlace ? " in place" : "") +
                   (exportable ? "" : " (not exportable)"));
    memory.freeAll();
  }

  // Reference: the host allreduce of the whole vector, block `rank` of it.
  void reduceScatter(DataType d, ReduceOp op) {
    std::vector<size_t> counts(size);
    size_t total = 0, offset = 0;
    for (int r = 0; r < size; ++r) {
      counts[r] = 40 * (r + 1) + 1;
      if (r == rank) offset = total;
      total += counts[r];
    }
    const size_t es = elementSize(d);
    const Bytes input = test::smallValues(d, total, rank, 4);
    Bytes all = input;
    AllreduceOptions o;
    o.send = o.recv = all.data();
    o.count = total;
    o.dtype = d;
    o.op = op;
    host.allreduce(o);
    const Bytes want(all.begin() + offset * es,
                     all.begin() + (offset + counts[rank]) * es);
    void* send = memory.alloc(total * es, true);
    void* recv = memory.alloc(counts[rank] * es, true);
    memory.upload(send, input.data(), total * es);
    ipc.reduceScatter(send, recv, counts, d, op, memory.stream());
    expectSame(want, memory.download(recv, counts[rank] * es), d,
               name("reduceScatter", d, op, total, false));
    memory.freeAll();
  }

  // Rank i sends split(i, j) elements to rank j; the expected result is
  // built from every rank's (deterministic) input.
  static size_t split(int i, int j) { return static_cast<size_t>((i + 2 * j) % 3) * 17; }

  void alltoall(DataType d, bool exportable) {
    const size_t es = elementSize(d);
    std::vector<size_t> sendCounts(size), recvCounts(size);
    Bytes want;
    for (int j = 0; j < size; ++j) {
      sendCounts[j] = split(rank, j);
      recvCounts[j] = split(j, rank);
      size_t total = 0, from = 0;
      for (int k = 0; k < size; ++k) {
        if (k == rank) from = total;
        total += split(j, k);
      }
      const Bytes theirs = test::smallValues(d, total, j, 5);
      want.insert(want.end(), theirs.begin() + from * es,
                  theirs.begin() + (from + recvCounts[j]) * es);
    }
    size_t sendTotal = 0;
    for (size_t c : sendCounts) sendTotal += c;
    const Bytes input = test::smallValues(d, sendTotal, rank, 5);
    void* send = memory.alloc(sendTotal * es + 1, exportable);
    void* recv = memory.alloc(want.size() + 1, exportable);
    memory.upload(send, input.data(), sendTotal * es);
    ipc.alltoall(send, sendCounts, recv, recvCounts, d, memory.stream());
    expectSame(want, memory.download(recv, want.size()), d,
               std::string("alltoall ") + std::string(toString(d)) +
                   (exportable ? "" : " (not exportable)"));
    memory.freeAll();
  }

  void runAll() {
    for (DataType d : kDtypes) {
      for (ReduceOp op : kOps) {
        for (size_t count : {size_t{1}, size_t{1037}, size_t{70001}}) {
          allreduce(d, op, count, false, true);
          allreduce(d, op, count, true, true);
        }
        reduceScatter(d, op);
      }
      for (int root = 0; root < size; ++root) broadcast(d, root);
      allgather(d, false, true);
      allgather(d, true, true);
      alltoall(d, true);
    }
    for (ReduceOp op : kOps) allreduce(DataType::kFloat16, op, 4099, false, false);
    allreduce(DataType::kFloat32, ReduceOp::kAverage, 4099, true, false);
    allgather(DataType::kInt32, false, false);
    alltoall(DataType::kBFloat16, false);
  }
};

int run(int argc, char** argv) {
  std::string device = "host";
  bool bench = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--device=", 0) == 0) device = a.substr(9);
    if (a == "--bench") bench = true;
  }
  auto host = Communicator::fromEnvironment();
  const int rank = host->rank(), size = host->size();
  std::unique_ptr<CheckMemory> memory;
  std::string why;
  if (device == "cuda") {
    memory = test::cudaCheckMemory(rank, &why);
  } else if (device == "host") {
    memory = test::hostCheckMemory();
  } else {
    std::fprintf(stderr, "cuda_ipc_check: --device must be host or cuda, got %s\n",
                 device.c_str());
    return 2;
  }
  if (!memory) {
    std::printf("rank %d SKIP: %s\n", rank, why.c_str());
    return 0;
  }
  const rendezvous::JobEnvironment env = rendezvous::detectJobEnvironment();
  if (env.localSize >= 0 && env.localSize != size) {
    std::printf("rank %d SKIP: the ranks are on more than one host\n", rank);
    return 0;
  }
  const Settings settings = Settings::fromEnvironment();
  std::unique_ptr<rendezvous::Store> store;
  if (size > 1) {
    store = rendezvous::openStore(env.rendezvous, false, std::chrono::seconds(20),
                                  settings.resolveJobSecret());
  } else {
    store = rendezvous::openStore("file://" + test::privateTempDir(), false,
                                  std::chrono::seconds(20));
  }
  cuda::IpcOptions options;
  options.localRank = rank;
  options.localSize = size;
  for (int r = 0; r < size; ++r) options.globalRanks.push_back(r);
  options.device = memory->device();
  options.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(settings.timeoutSeconds * 1000));
  options.name = "cuda_ipc_check";
  auto ipc = memory->makeCollectives(options, *store);
  Checker checker{*host, *ipc, *memory, rank, size};
  if (bench) {
    test::benchAllreduce(*ipc, *memory, rank, "slices");
    options.oneWriter = true;
    options.name = "cuda_ipc_check_one_writer";
    auto oneWriter = memory->makeCollectives(options, *store);
    test::benchAllreduce(*oneWriter, *memory, rank, "one_writer");
  } else {
    checker.runAll();
    // The same allreduces with one kernel on local rank 0 (oneWriter).
    options.oneWriter = true;
    options.name = "cuda_ipc_check_one_writer";
    auto oneWriter = memory->makeCollectives(options, *store);
    Checker second{*host, *oneWriter, *memory, rank, size};
    for (DataType d : kDtypes)
      for (ReduceOp op : kOps) second.allreduce(d, op, 1037, d == DataType::kInt32, true);
    checker.checks += second.checks;
    checker.failures += second.failures;
    if (device == "cuda")
      checker.failures += test::checkKernelOnDevice(*memory, rank, &checker.checks);
  }
  int32_t failed = checker.failures;
  const int checks = checker.checks, failures = checker.failures;
  ipc.reset();  // closes this rank's mappings of its peers' memory
  // The failure count, and a barrier: no rank frees memory (memory's
  // destructor) that a peer still maps.
  AllreduceOptions o;
  o.send = o.recv = &failed;
  o.count = 1;
  o.dtype = DataType::kInt32;
  host->allreduce(o);
  std::printf("rank %d: %s: %d checks, %d failed here, %d in all\n", rank,
              bench ? "bench" : "checks", checks, failures, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::printf("cuda_ipc_check: error: %s\n", e.what());
    return 1;
  }
}
