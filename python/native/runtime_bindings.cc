// kolo._native's asynchronous operations (include/kolo/runtime.h): the
// *_async submissions, their completion, process sets and the tools.
#include <kolo/kolo.h>
#include <kolo/runtime.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"

namespace kolo_native {
namespace {

// allreduce_async and grouped_allreduce_async.
void bindAllreduceAsync(py::module_& m) {
  m.def(
      "allreduce_async",
      [](const std::string& name, py::handle send, py::handle recv,
         std::vector<int64_t> shape, int dtype, int op, double prescale, double postscale,
         int processSet) {
        kolo_handle h = 0;
        check(kolo_allreduce_async(name.c_str(), addressOf(send, false),
                                   addressOf(recv, true), dims(shape), dimsData(shape),
                                   asEnum<kolo_dtype>(dtype), asEnum<kolo_op>(op),
                                   prescale, postscale, processSet, &h));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("recv_ptr"), py::arg("shape"),
      py::arg("dtype"), py::arg("op"), py::arg("prescale") = 1.0,
      py::arg("postscale") = 1.0, py::arg("process_set") = 0,
      "Submits an allreduce; recv may equal send. Returns a handle.");
  m.def(
      "grouped_allreduce_async",
      [](const std::vector<std::string>& names, const std::vector<py::handle>& sends,
         const std::vector<py::handle>& recvs,
         const std::vector<std::vector<int64_t>>& shapes, int dtype, int op,
         double prescale, double postscale, int processSet) {
        GroupedBuffers b("grouped_allreduce_async", names, sends, recvs, shapes);
        const size_t n = b.names.size();
        std::vector<kolo_handle> handles(n);
        check(kolo_grouped_allreduce_async(
            static_cast<int>(n), b.names.data(), b.sends.data(), b.recvs.data(),
            b.ndims.data(), b.shapes.data(), asEnum<kolo_dtype>(dtype),
            asEnum<kolo_op>(op), prescale, postscale, processSet, handles.data()));
        return handles;
      },
      py::arg("names"), py::arg("send_ptrs"), py::arg("recv_ptrs"), py::arg("shapes"),
      py::arg("dtype"), py::arg("op"), py::arg("prescale") = 1.0,
      py::arg("postscale") = 1.0, py::arg("process_set") = 0,
      "Allreduces that always run together (one fusion bucket). Returns handles.");
}

// A completed handle's output (kolo_handle_output), its shape copied.
struct HandleOutput {
  const void* data = nullptr;
  size_t bytes = 0;
  std::vector<int64_t> shape;
};

HandleOutput handleOutput(kolo_handle h) {
  HandleOutput out;
  int ndim = 0;
  const int64_t* shape = nullptr;
  check(kolo_handle_output(h, &out.data, &out.bytes, &ndim, &shape));
  out.shape.assign(shape, shape + ndim);
  return out;
}

}  // namespace

// The runtime's operations; each returns a handle.
void bindAsyncOperations(py::module_& m) {
  bindAllreduceAsync(m);
  m.def(
      "allgather_async",
      [](const std::string& name, py::handle send, std::vector<int64_t> shape, int dtype,
         int processSet) {
        kolo_handle h = 0;
        check(kolo_allgather_async(name.c_str(), addressOf(send, false), dims(shape),
                                   dimsData(shape), asEnum<kolo_dtype>(dtype), processSet,
                                   &h));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("process_set") = 0,
      "Submits an allgather (first dimensions may differ); read the result with "
      "output().");
  m.def(
      "broadcast_async",
      [](const std::string& name, py::handle buf, std::vector<int64_t> shape, int dtype,
         int root, int processSet) {
        kolo_handle h = 0;
        check(kolo_broadcast_async(name.c_str(), addressOf(buf, true), dims(shape),
                                   dimsData(shape), asEnum<kolo_dtype>(dtype), root,
                                   processSet, &h));
        return h;
      },
      py::arg("name"), py::arg("ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("root"), py::arg("process_set") = 0,
      "Submits an in-place broadcast from `root`.");
  m.def(
      "alltoall_async",
      [](const std::string& name, py::handle send, std::vector<int64_t> shape, int dtype,
         std::optional<std::vector<int64_t>> splits, int processSet) {
        kolo_handle h = 0;
        const int64_t* s = splits ? splits->data() : nullptr;
        const int ns = splits ? static_cast<int>(splits->size()) : 0;
        if (splits && splits->empty()) {
          raise(KOLO_ERR_INVALID_ARGUMENT,
                "alltoall_async '" + name + "': empty splits (give None for equal)");
        }
        check(kolo_alltoall_async(name.c_str(), addressOf(send, false), dims(shape),
                                  dimsData(shape), s, ns, asEnum<kolo_dtype>(dtype),
                                  processSet, &h));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("splits") = py::none(), py::arg("process_set") = 0,
      "Submits an alltoall; splits: rows to each rank (None: equal). Result: output().");
  m.def(
      "reducescatter_async",
      [](const std::string& name, py::handle send, std::vector<int64_t> shape, int dtype,
         int op, int processSet) {
        kolo_handle h = 0;
        check(kolo_reducescatter_async(name.c_str(), addressOf(send, false), dims(shape),
                                       dimsData(shape), asEnum<kolo_dtype>(dtype),
                                       asEnum<kolo_op>(op), processSet, &h));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("op"), py::arg("process_set") = 0,
      "Submits a reducescatter (first dimension divisible by the set size); result: "
      "output().");
  m.def(
      "barrier_async",
      [](int processSet) {
        kolo_handle h = 0;
        check(kolo_barrier_async(processSet, &h));
        return h;
      },
      py::arg("process_set") = 0);
  m.def(
      "send_async",
      [](py::handle buf, size_t count, int dtype, int peer, int tag, int processSet) {
        kolo_handle h = 0;
        check(kolo_isend(addressOf(buf, false), count, asEnum<kolo_dtype>(dtype), peer,
                         tag, processSet, &h));
        return h;
      },
      py::arg("ptr"), py::arg("count"), py::arg("dtype"), py::arg("peer"), py::arg("tag"),
      py::arg("process_set") = 0,
      "Starts a point-to-point send (kolo_isend; peer: a rank of the set).");
  m.def(
      "recv_async",
      [](py::handle buf, size_t count, int dtype, int peer, int tag, int processSet) {
        kolo_handle h = 0;
        check(kolo_irecv(addressOf(buf, true), count, asEnum<kolo_dtype>(dtype), peer,
                         tag, processSet, &h));
        return h;
      },
      py::arg("ptr"), py::arg("count"), py::arg("dtype"), py::arg("peer"), py::arg("tag"),
      py::arg("process_set") = 0,
      "Starts a point-to-point receive (kolo_irecv; peer: a rank of the set).");
  m.def(
      "join_async",
      [](int processSet) {
        kolo_handle h = 0;
        check(kolo_join_async(processSet, &h));
        return h;
      },
      py::arg("process_set") = 0,
      "This rank is out of data: it contributes zeros until every rank has joined.");
}

void bindCompletion(py::module_& m) {
  m.def(
      "poll",
      [](kolo_handle h) {
        int done = 0;
        check(kolo_poll(h, &done));
        return done == 1;
      },
      py::arg("handle"), "True once the operation has finished (well or not).");
  m.def(
      "wait",
      [](kolo_handle h) {
        int rc;
        std::string message;
        {
          py::gil_scoped_release nogil;
          rc = kolo_wait(h);
          if (rc != KOLO_OK) message = kolo_last_error();
        }
        if (rc != KOLO_OK) raise(rc, message);
      },
      py::arg("handle"),
      "Blocks (without the GIL) until done; raises the operation's error.");
  m.def(
      "output",
      [](kolo_handle h) {
        HandleOutput out = handleOutput(h);
        return py::make_tuple(py::bytes(static_cast<const char*>(out.data), out.bytes),
                              out.shape);
      },
      py::arg("handle"),
      "(bytes, shape) of an allgather, alltoall or reducescatter result (a copy).");
  m.def(
      "output_shape", [](kolo_handle h) { return handleOutput(h).shape; },
      py::arg("handle"), "The shape of output() without copying the data.");
  m.def(
      "output_into",
      [](kolo_handle h, py::handle dest, size_t capacity) {
        const void* data = nullptr;
        size_t bytes = 0;
        int ndim = 0;
        const int64_t* shape = nullptr;
        check(kolo_handle_output(h, &data, &bytes, &ndim, &shape));
        if (bytes > capacity) {
          raise(KOLO_ERR_INVALID_ARGUMENT,
                "output_into: the result has " + std::to_string(bytes) +
                    " bytes, room for " + std::to_string(capacity));
        }
        if (bytes > 0) std::memcpy(addressOf(dest, true), data, bytes);
        return bytes;
      },
      py::arg("handle"), py::arg("dest_ptr"), py::arg("capacity"),
      "Copies output() into memory at dest_ptr (room for `capacity` bytes); returns "
      "the bytes copied.");
  m.def(
      "release", [](kolo_handle h) { check(kolo_release(h)); }, py::arg("handle"),
      "Frees the handle; a pending operation still runs (keep its buffers alive).");
}

void bindProcessSets(py::module_& m) {
  m.def(
      "process_set_create",
      [](const std::vector<int>& ranks) {
        int id = -1, rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_process_set_create(ranks.data(), static_cast<int>(ranks.size()), &id);
        }
        check(rc);
        return id;
      },
      py::arg("ranks"),
      "Collective over the listed ranks only (same list, same order on each). Returns "
      "the id, agreed by the members.");
  m.def(
      "process_set_destroy",
      [](int id) {
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_process_set_destroy(id);
        }
        check(rc);
      },
      py::arg("id"));
  m.def(
      "process_set_rank",
      [](int id) {
        int r = -1;
        check(kolo_process_set_rank(id, &r));
        return r;
      },
      py::arg("id"), "This rank's index in the set; -1 when not a member.");
  m.def(
      "process_set_size",
      [](int id) {
        int s = 0;
        check(kolo_process_set_size(id, &s));
        return s;
      },
      py::arg("id"));
}

// The timeline and the straggler report.
void bindTools(py::module_& m) {
  m.def(
      "start_timeline",
      [](const std::string& path) { check(kolo_start_timeline(path.c_str())); },
      py::arg("path"));
  m.def("stop_timeline", [] { check(kolo_stop_timeline()); });
  m.def(
      "timeline_begin",
      [](const std::string& track, const std::string& phase,
         const std::vector<std::pair<std::string, std::string>>& args) {
        std::vector<const char*> keys, values;
        for (const auto& [k, v] : args) {
          keys.push_back(k.c_str());
          values.push_back(v.c_str());
        }
        check(kolo_timeline_begin(track.c_str(), phase.c_str(), keys.data(),
                                  values.data(), static_cast<int>(args.size())));
      },
      py::arg("track"), py::arg("phase"),
      py::arg("args") = std::vector<std::pair<std::string, std::string>>{});
  m.def(
      "timeline_end",
      [](const std::string& track) { check(kolo_timeline_end(track.c_str())); },
      py::arg("track"));
  m.def("timeline_active", [] {
    int active = 0;
    check(kolo_timeline_active(&active));
    return active != 0;
  });
  m.def(
      "straggler_report",
      [](int processSet) {
        int size = 0;
        check(kolo_process_set_size(processSet, &size));
        std::vector<kolo_rank_lag> lags(size);
        check(kolo_straggler_report(processSet, lags.data(), size));
        py::list out;
        for (const auto& l : lags) {
          py::dict d;
          d["operations"] = l.operations;
          d["times_last"] = l.times_last;
          d["mean_lag_seconds"] = l.mean_lag_seconds;
          d["max_lag_seconds"] = l.max_lag_seconds;
          out.append(d);
        }
        return out;
      },
      py::arg("process_set") = 0);
}

}  // namespace kolo_native
