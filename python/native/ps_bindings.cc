// kolo._native's parameter-server functions (include/kolo/ps.h); tensors
// cross as data addresses.
#include <kolo/kolo.h>
#include <kolo/ps.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"

namespace kolo_native {
namespace {

// Starting a job and its training steps.
void bindPsTraining(py::module_& m) {
  m.def("ps_servers", [] {
    int n = 0;
    check(kolo_ps_servers(&n));
    return n;
  });
  m.def("ps_start", [](py::dict o, std::vector<uintptr_t> params,
                       std::vector<uint64_t> counts) {
    const std::string mode = py::str(o["mode"]), optimizer = py::str(o["optimizer"]);
    kolo_ps_options c{};
    c.mode = mode.c_str();
    c.optimizer = optimizer.c_str();
    auto f = [&](const char* k) { return o[k].cast<float>(); };
    auto i = [&](const char* k) { return o[k].cast<int>(); };
    c.lr = f("lr");
    c.weight_decay = f("weight_decay");
    c.momentum = f("momentum");
    c.dampening = f("dampening");
    c.nesterov = i("nesterov");
    c.beta1 = f("beta1");
    c.beta2 = f("beta2");
    c.eps = f("eps");
    c.alpha = f("alpha");
    c.centered = i("centered");
    c.staleness_bound = i("staleness_bound");
    c.backup_workers = i("backup_workers");
    c.easgd_alpha = f("easgd_alpha");
    c.push_period = i("push_period");
    c.pull_period = i("pull_period");
    c.easgd_period = i("easgd_period");
    c.pushers = o.contains("pushers") ? i("pushers") : 0;
    c.validators = o.contains("validators") ? i("validators") : 0;
    std::vector<float*> p;
    for (uintptr_t a : params) p.push_back(reinterpret_cast<float*>(a));
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_start(&c, p.size(), p.data(), counts.data());
    }
    check(rc);
  });
  m.def("ps_step",
        [](std::vector<uintptr_t> params, std::vector<uintptr_t> grads, float lr) {
          std::vector<float*> p;
          std::vector<const float*> g;
          for (uintptr_t a : params) p.push_back(reinterpret_cast<float*>(a));
          for (uintptr_t a : grads) g.push_back(reinterpret_cast<const float*>(a));
          int rc;
          {
            py::gil_scoped_release nogil;
            rc = kolo_ps_step(p.data(), g.data(), lr);
          }
          check(rc);
        });
  m.def("ps_pull", [](std::vector<uintptr_t> params) {
    std::vector<float*> p;
    for (uintptr_t a : params) p.push_back(reinterpret_cast<float*>(a));
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_pull(p.data());
    }
    check(rc);
  });
  m.def("ps_exchange", [](std::vector<uintptr_t> params) {
    std::vector<float*> p;
    for (uintptr_t a : params) p.push_back(reinterpret_cast<float*>(a));
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_exchange(p.data());
    }
    check(rc);
  });
}

// Stopping, the job's state, checkpoints and statistics.
void bindPsState(py::module_& m) {
  m.def("ps_request_stop", [] {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_request_stop();
    }
    check(rc);
  });
  m.def("ps_stop_requested", [] {
    int v = 0;
    check(kolo_ps_stop_requested(&v));
    return v != 0;
  });
  m.def("ps_version", [] {
    uint64_t v = 0;
    check(kolo_ps_version(&v));
    return v;
  });
  m.def("ps_validators", [] {
    int v = 0;
    check(kolo_ps_validators(&v));
    return v;
  });
  m.def("ps_training_over", [] {
    int v = 0;
    check(kolo_ps_training_over(&v));
    return v != 0;
  });
  m.def("ps_finish", [] {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_finish();
    }
    check(rc);
  });
  m.def("ps_staleness", [] {
    uint64_t v = 0;
    check(kolo_ps_staleness(&v));
    return v;
  });
  m.def("ps_save", [](const std::string& path) {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_save(path.c_str());
    }
    check(rc);
  });
  m.def("ps_load", [](const std::string& path, std::vector<uintptr_t> params) {
    std::vector<float*> p;
    for (uintptr_t a : params) p.push_back(reinterpret_cast<float*>(a));
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_load(path.c_str(), p.data());
    }
    check(rc);
  });
  m.def("ps_stats", [] {
    std::vector<uint64_t> out(1 << 16);
    size_t n = 0;
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_stats(out.data(), out.size(), &n);
    }
    check(rc);
    out.resize(n);
    return out;
  });
}

}  // namespace

void bindParameterServers(py::module_& m) {
  bindPsTraining(m);
  bindPsState(m);
}

}  // namespace kolo_native
