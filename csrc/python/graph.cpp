// torch_pjrt._C bindings of the graph builder (aten/graph.h), used by python/torch_pjrt/dynamo.py.
#include "aten/graph.h"

#include <ATen/ScalarOps.h>
#include <ATen/ops/as_strided.h>
#include <ATen/ops/empty.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <cstring>

#include "aten/storage.h"

namespace py = pybind11;

namespace torch_pjrt {
namespace {

at::ScalarType dtype_of(const py::handle& o) {
  TORCH_CHECK(THPDtype_Check(o.ptr()), "expected a torch.dtype");
  return reinterpret_cast<THPDtype*>(o.ptr())->scalar_type;
}

OutSpec out_spec(const py::handle& o) {  // None, or (dtype, sizes)
  OutSpec s;
  if (o.is_none()) {
    s.defined = false;
    return s;
  }
  auto t = o.cast<py::tuple>();
  s.dtype = dtype_of(t[0]);
  s.sizes = t[1].cast<std::vector<int64_t>>();
  return s;
}

c10::Scalar number(const py::handle& a) {
  if (PyBool_Check(a.ptr())) return c10::Scalar(a.cast<bool>());
  if (PyLong_Check(a.ptr())) return c10::Scalar(a.cast<int64_t>());
  TORCH_CHECK(PyFloat_Check(a.ptr()), "expected a Python number");
  return c10::Scalar(a.cast<double>());
}

// A compiled graph's results that are views (of its arguments or of its program's outputs), made in one
// call: per view its sizes, strides and offset (relative: added to the base's own storage offset).
struct Views {
  struct Spec {
    std::vector<int64_t> sizes, strides;
    int64_t offset;
    bool relative;
  };
  std::vector<Spec> specs;

  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& bases) const {
    TORCH_CHECK(bases.size() == specs.size(), "views: ", bases.size(), " bases for ", specs.size(), " views");
    std::vector<at::Tensor> out;
    out.reserve(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      const at::Tensor& b = bases[i];
      out.push_back(at::as_strided(b, s.sizes, s.strides, s.relative ? b.storage_offset() + s.offset : s.offset));
    }
    return out;
  }
};

// 0-d CPU tensors of one dtype (the optimizer's step counts) as one [n] tensor on a tpu device: one upload.
at::Tensor pack_scalars(const std::vector<at::Tensor>& scalars, int device) {
  TORCH_CHECK(!scalars.empty(), "pack_scalars: no tensors");
  at::Tensor host = at::empty({static_cast<int64_t>(scalars.size())}, scalars[0].options());
  const size_t item = host.element_size();
  char* dst = static_cast<char*>(host.data_ptr());
  for (size_t i = 0; i < scalars.size(); ++i) {
    const at::Tensor& t = scalars[i];
    TORCH_CHECK(t.device().is_cpu() && t.dim() == 0 && t.scalar_type() == host.scalar_type(),
                "pack_scalars: expected 0-d CPU tensors of dtype ", host.scalar_type(), ", got ", t.dim(),
                "-d ", t.scalar_type(), " on ", t.device());
    std::memcpy(dst + i * item, t.const_data_ptr(), item);
  }
  return upload(host, device);
}

// The optimizer's host write `step += 1` for every parameter (AdamW's float step counts on the CPU), done
// in place on each 0-d CPU tensor as torch's CPU kernel computes it (in the tensor's type), each tensor's
// version bumped; without a dispatcher call per tensor (torch's _foreach_add_ on 21 such tensors: 27 us).
// False, touching nothing, when a tensor is not a 0-d CPU float32, float64 or int64 tensor without grad
// (or the value is not whole for an int64 one): the caller runs the op instead.
bool add_scalars(const std::vector<at::Tensor>& tensors, double value) {
  for (const at::Tensor& t : tensors) {
    const auto type = t.scalar_type();
    const bool ok_type = type == at::kFloat || type == at::kDouble || (type == at::kLong && value == std::trunc(value));
    if (!t.defined() || !t.device().is_cpu() || t.dim() != 0 || t.requires_grad() || !ok_type || t.is_inference() ||
        t.is_neg() || t.is_conj())
      return false;
  }
  for (const at::Tensor& t : tensors) {
    void* p = t.mutable_data_ptr();
    switch (t.scalar_type()) {
      case at::kFloat: *static_cast<float*>(p) += static_cast<float>(value); break;
      case at::kDouble: *static_cast<double*>(p) += value; break;
      default: *static_cast<int64_t*>(p) += static_cast<int64_t>(value); break;
    }
    t.unsafeGetTensorImpl()->bump_version();
  }
  return true;
}

}  // namespace

void bind_graph(py::module_& m) {
  py::class_<Views>(m, "_Views")
      .def(py::init([](const std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, int64_t, bool>>& specs) {
        Views v;
        for (const auto& [sizes, strides, offset, relative] : specs) v.specs.push_back({sizes, strides, offset, relative});
        return v;
      }))
      .def("__call__", &Views::operator());
  m.def("_pack_scalars", &pack_scalars);
  m.def("_add_scalars_", &add_scalars);
  py::class_<GraphProgram, std::shared_ptr<GraphProgram>>(m, "_GraphProgram")
      .def("run", &GraphProgram::run)
      .def("run_writing", &GraphProgram::run_writing)
      .def_property_readonly("num_inputs", &GraphProgram::num_inputs);
  py::class_<GraphBuilder>(m, "_GraphBuilder")
      .def(py::init<std::string>())
      .def(
          "input",
          [](GraphBuilder& g, py::handle dtype, std::vector<int64_t> sizes, bool donor, std::vector<int64_t> strides) {
            return g.input(dtype_of(dtype), sizes, donor, strides);
          },
          py::arg("dtype"), py::arg("sizes"), py::arg("donor") = false, py::arg("strides") = std::vector<int64_t>{})
      .def_static("has_row", &GraphBuilder::has_row)
      .def("apply",
           [](GraphBuilder& g, const std::string& overload, py::list args, std::vector<int> ids, py::list outs) {
             auto dot = overload.find('.');
             const auto& schema = c10::Dispatcher::singleton()
                                      .findSchemaOrThrow(("aten::" + overload.substr(0, dot)).c_str(),
                                                         dot == std::string::npos ? "" : overload.substr(dot + 1).c_str())
                                      .schema();
             torch::jit::Stack stack;
             for (size_t i = 0; i < args.size(); ++i) {
               const auto& type = schema.arguments().at(i).real_type();
               py::handle a = args[i];
               if (type->kind() == c10::TypeKind::TensorType && (PyFloat_Check(a.ptr()) || PyLong_Check(a.ptr()))) {
                 // a Python number in a Tensor position: a wrapped number, as eager sees it
                 at::Tensor t = c10::scalar_to_tensor(number(a));
                 t.unsafeGetTensorImpl()->set_wrapped_number(true);
                 stack.push_back(t);
                 continue;
               }
               stack.push_back(torch::jit::toIValue(a, type));
             }
             std::vector<OutSpec> specs;
             for (auto o : outs) specs.push_back(out_spec(o));
             return g.apply(overload, stack, ids, specs);
           })
      .def("view",
           [](GraphBuilder& g, int id, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset,
              py::handle dtype, int offset_id) { return g.view(id, sizes, strides, offset, dtype_of(dtype), offset_id); },
           py::arg("id"), py::arg("sizes"), py::arg("strides"), py::arg("offset"), py::arg("dtype"),
           py::arg("offset_id") = -1)
      .def("scatter_view", &GraphBuilder::scatter_view, py::arg("base"), py::arg("src"), py::arg("sizes"),
           py::arg("strides"), py::arg("offset"), py::arg("offset_id") = -1)
      .def("transpose", &GraphBuilder::transpose)
      .def("call",
           [](GraphBuilder& g, const std::string& functions, const std::string& callee, std::vector<int> ids,
              py::list outs, std::map<std::string, std::string> by_plugin) {
             std::vector<OutSpec> specs;
             for (auto o : outs) specs.push_back(out_spec(o));
             return g.call(functions, callee, ids, specs, by_plugin);
           },
           py::arg("functions"), py::arg("callee"), py::arg("ids"), py::arg("outs"),
           py::arg("by_plugin") = std::map<std::string, std::string>{})
      .def("full", [](GraphBuilder& g, py::handle dtype, std::vector<int64_t> sizes,
                      py::handle v) { return g.full(dtype_of(dtype), sizes, number(v)); })
      .def("cast", [](GraphBuilder& g, int id, py::handle spec) { return g.cast(id, out_spec(spec)); })
      .def("compile", [](GraphBuilder& g, const std::vector<int>& ids) { return g.compile(ids); });
}

}  // namespace torch_pjrt
