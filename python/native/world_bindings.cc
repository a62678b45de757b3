// kolo._native's lifetime and layout functions and the synchronous
// collectives of kolo.h (the world communicator).
#include <kolo/kolo.h>
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.h"

namespace kolo_native {
namespace {

// The layout queries return -1 only before kolo_init (kolo_last_error() is
// not theirs to set).
int layoutValue(int v, const char* name) {
  if (v < 0)
    raise(KOLO_ERR_NOT_INITIALIZED, std::string(name) + " called before kolo_init");
  return v;
}

}  // namespace

// Joining and leaving the job, the layout, the elastic world.
void bindLifetime(py::module_& m) {
  m.def(
      "init",
      [] {
        if (kolo_initialized()) return;  // idempotent, like Horovod's init
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_init();
        }
        check(rc);
      },
      "Joins the job (layout from kolorun, mpirun, srun or torchrun variables) and "
      "starts the runtime. A second call does nothing.");
  m.def(
      "shutdown",
      [] {
        if (!kolo_initialized()) return;
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_finalize();
        }
        check(rc);
      },
      "Stops the runtimes (pending operations fail) and leaves the job. Does nothing "
      "when not initialized.");
  m.def("is_initialized", [] { return kolo_initialized() == 1; });
  m.def("rank", [] { return layoutValue(kolo_rank(), "kolo_rank"); });
  m.def("size", [] { return layoutValue(kolo_size(), "kolo_size"); });
  m.def("local_rank", [] { return layoutValue(kolo_local_rank(), "kolo_local_rank"); });
  m.def("local_size", [] { return layoutValue(kolo_local_size(), "kolo_local_size"); });
  m.def("cross_rank", [] { return layoutValue(kolo_cross_rank(), "kolo_cross_rank"); });
  m.def("cross_size", [] { return layoutValue(kolo_cross_size(), "kolo_cross_size"); });

  m.def(
      "elastic_host_updates",
      [] {
        int64_t updates = 0, additions = 0;
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_elastic_host_updates(&updates, &additions);
        }
        check(rc);
        return py::make_tuple(updates, additions);
      },
      "(updates, additions): how often the elastic launcher's hosts changed, and how "
      "many of those changes added a host; (0, 0) outside an elastic job.");
  m.def(
      "elastic_world",
      [] {
        int64_t generation = 0, updates = 0, additions = 0;
        check(kolo_elastic_world(&generation, &updates, &additions));
        return py::make_tuple(generation, updates, additions);
      },
      "(generation, updates, additions) of this process's elastic world: the launcher's "
      "host-update counters when it formed the world; generation 0 outside an elastic "
      "job.");
  m.def(
      "study_declare",
      [](bool inside) {
        int told = 0;
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_study_declare(inside ? 1 : 0, &told);
        }
        check(rc);
        return told == 1;
      },
      py::arg("inside"),
      "Tells kolorun that this rank runs (inside=True) or no longer runs a kolo.hpo "
      "study, so that its failure does not end the job meanwhile; True when kolorun was "
      "told, False when the job has no kolorun (nothing is done).");
}

// kolo.h, world communicator; the GIL is released while they block.
void bindSyncCollectives(py::module_& m) {
  m.def(
      "allreduce",
      [](py::handle send, py::handle recv, size_t count, int dtype, int op) {
        const void* s = addressOf(send, false);
        void* r = addressOf(recv, true);
        int rc;
        {
          py::gil_scoped_release nogil;
          rc =
              kolo_allreduce(s, r, count, asEnum<kolo_dtype>(dtype), asEnum<kolo_op>(op));
        }
        check(rc);
      },
      py::arg("send_ptr"), py::arg("recv_ptr"), py::arg("count"), py::arg("dtype"),
      py::arg("op"));
  m.def(
      "broadcast",
      [](py::handle buf, size_t count, int dtype, int root) {
        void* b = addressOf(buf, true);
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_broadcast(b, count, asEnum<kolo_dtype>(dtype), root);
        }
        check(rc);
      },
      py::arg("ptr"), py::arg("count"), py::arg("dtype"), py::arg("root"));
  m.def("barrier", [] {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_barrier();
    }
    check(rc);
  });
}

}  // namespace kolo_native
