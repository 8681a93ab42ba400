// torch_pjrt._C._distributed: the tpu_dist backend for Python (python/torch_pjrt/distributed.py makes it).
// Bound on first use, after `import torch.distributed` has registered c10d's own classes, which ours
// derive from.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "distributed/backend.h"

namespace py = pybind11;

namespace torch_pjrt {

void bind_distributed(py::module_& m) {
  m.def("_init_distributed", [m]() mutable {
    if (py::hasattr(m, "_distributed")) return;
    auto d = m.def_submodule("_distributed", "the tpu_dist c10d backend");
    using distributed::TpuBackend;
    py::class_<TpuBackend, c10d::Backend, c10::intrusive_ptr<TpuBackend>>(d, "TpuBackend")
        .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::chrono::milliseconds timeout, std::string name, std::vector<uint64_t> global_ranks,
                         const c10::intrusive_ptr<c10d::Backend>& host, std::vector<int> devices) {
               distributed::Group g{std::move(name), rank, size, std::move(global_ranks), timeout};
               return c10::make_intrusive<TpuBackend>(std::move(g), store, host, std::move(devices));
             }),
             py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("group_name"),
             py::arg("global_ranks"), py::arg("host"), py::arg("devices") = std::vector<int>{})
        .def_property_readonly("group_name", [](const TpuBackend& b) { return b.group().name; })
        .def_property_readonly("transport", [](const TpuBackend& b) { return b.transport(); });
    d.def("_counters", [] {
      auto& c = distributed::counters();
      py::dict r;
      r["collectives"] = c.collectives.load();
      r["program_collectives"] = c.program_collectives.load();
      r["bytes_to_host"] = c.bytes_to_host.load();
      r["bytes_to_device"] = c.bytes_to_device.load();
      return r;
    });
  });
}

}  // namespace torch_pjrt
