// torch_pjrt._C: the Python glue. Everything else lives in the aten and pjrt layers.
#include <ATen/Context.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "aten/compile_log.h"
#include "aten/device_checks.h"
#include "aten/errors.h"
#include "aten/execution.h"
#include "aten/fallback.h"
#include "aten/generator.h"
#include "aten/storage.h"
#include "aten/table_kernel.h"
#include "pjrt/session.h"

namespace py = pybind11;
using namespace torch_pjrt;

namespace torch_pjrt {
void bind_graph(py::module_& m);        // graph.cpp
void bind_distributed(py::module_& m);  // distributed/bind.cpp
}

namespace {

py::dict plugin_info() {
  py::dict d;
  auto* s = pjrt::Session::get_or_null();
  d["available"] = s != nullptr;
  if (!s) {
    d["reason"] = pjrt::Session::unavailable_reason();
    return d;
  }
  const auto& plugin = s->client().plugin();
  d["path"] = plugin.path();
  d["kind"] = s->choice().kind;
  d["api_version"] = std::to_string(plugin.api_major()) + "." + std::to_string(plugin.api_minor());
  d["platform"] = s->client().platform_name();
  d["platform_version"] = s->client().platform_version();
  d["host_kernels"] = s->host_kernels();
  if (!s->host_kernels()) d["host_kernels_reason"] = s->host_kernels_reason();
  py::dict attrs;
  for (const auto& [k, v] : plugin.attributes()) attrs[py::str(k)] = v;
  d["attributes"] = attrs;
  py::list devices;
  for (int i = 0; i < s->client().device_count(); ++i) {
    const auto& dev = s->client().device(i);
    py::dict e;
    e["index"] = i;
    e["id"] = dev.id;
    e["kind"] = dev.kind;
    e["description"] = dev.description;
    devices.append(e);
  }
  d["devices"] = devices;
  d["cache_dir"] = s->programs().dir();
  return d;
}

// The deviceless targets' counts (pjrt/aot.h), by target name; empty without TORCH_PJRT_AOT_TARGETS.
py::dict aot_stats() {
  py::dict d;
  auto* s = pjrt::Session::get_or_null();
  if (!s || !s->aot()) return d;
  for (const auto& t : s->aot()->stats()) {
    py::dict e;
    e["device"] = t.device;
    e["platform"] = t.platform;
    e["compiles"] = t.compiles;
    e["failures"] = t.failures;
    e["cached"] = t.cached;
    e["pending"] = t.pending;
    e["compile_seconds"] = t.seconds;
    d[py::str(t.target)] = e;
  }
  return d;
}

py::dict metrics_dict() {
  py::dict d;
  py::dict fb;
  int64_t total = 0;
  for (const auto& [op, n] : fallback_counts()) {
    fb[py::str(op)] = n;
    total += n;
  }
  d["fallbacks"] = fb;
  d["fallback_total"] = total;
  d["cache_hits"] = metrics().cache_hits.load();
  d["cache_misses"] = metrics().cache_misses.load();
  d["executions"] = metrics().executions.load();
  d["donation_copies"] = metrics().donation_copies.load();
  auto* s = pjrt::Session::get_or_null();
  pjrt::CacheStats cs = s ? s->programs().stats() : pjrt::CacheStats{};
  d["compiles"] = cs.compiles;
  d["compile_seconds"] = cs.compile_seconds;
  d["disk_cache_hits"] = cs.disk_hits;
  d["disk_cache_corrupt"] = cs.disk_corrupt;
  d["disk_cache_evictions"] = cs.disk_evictions;
  d["live_buffers"] = pjrt::Buffer::live_count();
  d["live_bytes"] = pjrt::Buffer::live_bytes();
  d["scalar_cache_entries"] = scalar_cache_entries();
  d["aot"] = aot_stats();
  CheckCounts cc = check_counts();
  py::dict checks;
  checks["enabled"] = hlo::Builder::device_checks;
  checks["pending"] = cc.pending;
  checks["read"] = cc.read;
  checks["failed"] = cc.failed;
  d["device_checks"] = checks;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  register_aten_kernels();
  bind_graph(m);
  bind_distributed(m);
  m.def("_configure", [](std::vector<std::string> roots) { pjrt::Session::configure(std::move(roots)); });
  m.def("_is_available", [] { return device_count() > 0; });
  m.def("_unavailable_reason", [] { return pjrt::Session::unavailable_reason(); });
  m.def("_init", [] {
    session_or_throw();
    at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
  });
  m.def("_device_count", [] { return device_count(); });
  m.def("_find_plugin", [](const std::string& kind) { return pjrt::find_plugin(kind, pjrt::Session::search_roots()); });
  m.def("_gpu_target_spec", [](const std::string& device) {
    return pjrt::Aot::gpu_target_spec(pjrt::find_plugin("cuda", pjrt::Session::search_roots()), device);
  });
  m.def("_aot_targets", [] {
    py::list out;
    for (const auto& t : pjrt::aot_targets()) out.append(py::make_tuple(t.name, t.plugin, t.device));
    return out;
  });
  // The programs handed to the targets: (program, this device's launches, this device's cost analysis or
  // None when `device_costs` is false or the executable was freed, {target: cost analysis}).
  m.def("_aot_programs", [](bool device_costs) {
    py::list out;
    auto* s = pjrt::Session::if_started();
    if (!s || !s->aot()) return out;
    std::vector<pjrt::AotStats> stats = s->aot()->stats();
    for (const auto& p : s->aot()->programs()) {
      py::dict costs;
      for (size_t i = 0; i < stats.size(); ++i) costs[py::str(stats[i].target)] = p.costs[i];
      py::object device = py::none();
      if (device_costs && p.executable) device = py::cast(p.executable->cost_analysis());
      out.append(py::make_tuple(p.program, p.executable ? p.executable->launches() : 0, device, costs));
    }
    return out;
  }, py::arg("device_costs") = false);
  m.def("_aot_report", [](bool wait) {
    py::dict d;
    auto* s = pjrt::Session::if_started();
    if (!s || !s->aot()) return d;
    if (wait) {
      py::gil_scoped_release release;
      s->aot()->drain();
    }
    d["targets"] = aot_stats();
    py::list failures;
    for (const auto& f : s->aot()->failures()) failures.append(py::make_tuple(f.target, f.program, f.error));
    d["failures"] = failures;
    return d;
  }, py::arg("wait") = true);
  m.def("_empty_cache", [] {
    if (auto* s = pjrt::Session::get_or_null()) s->release_freed_memory();
  });
  m.def("_get_device", [] { return current_device(); });
  m.def("_set_device", [](int d) { set_current_device(d); });
  m.def("_exchange_device", [](int d) {
    int old = current_device();
    if (d >= 0) set_current_device(d);
    return old;
  });
  m.def("_synchronize", [](int d) {
    py::gil_scoped_release no_gil;
    synchronize(d);
  });
  m.def("_plugin_info", &plugin_info);
  m.def("_device_kind", [](int d) { return session_or_throw().client().device(d).kind; });
  m.def("_memory_stats", [](int d) {
    auto st = session_or_throw().client().memory_stats(d);
    py::dict r;
    r["live_bytes"] = pjrt::Buffer::live_bytes(d);
    r["live_buffers"] = pjrt::Buffer::live_count(d);
    r["peak_bytes"] = pjrt::Buffer::peak_bytes(d);
    r["plugin_bytes_in_use"] = st.bytes_in_use;
    r["plugin_bytes_limit"] = st.bytes_limit;
    return r;
  });
  m.def("_reset_peak_memory", [](int d) { pjrt::Buffer::reset_peak_bytes(d); });
  m.def("_metrics", &metrics_dict);
  m.def("_reset_metrics", [] {
    reset_fallback_counts();
    metrics().cache_hits = 0;
    metrics().cache_misses = 0;
    metrics().executions = 0;
    metrics().donation_copies = 0;
  });
  // Compile reasons (aten/compile_log.h): (op, signature, reason, from_disk, seconds) per new program.
  m.def("_compile_records", [] {
    py::list out;
    for (const CompileRecord& r : compile_records())
      out.append(py::make_tuple(r.op, r.signature, r.reason, r.from_disk, r.seconds));
    return out;
  });
  m.def("_reset_compile_report", &reset_compile_report);
  m.def("_set_log_compiles", &set_log_compiles);
  m.def("_log_compiles", &log_compiles);
  m.def("_set_fallback_policy", [](const std::string& p) {
    TORCH_CHECK(p == "warn" || p == "silent" || p == "error", "fallback policy must be warn, silent or error");
    set_fallback_policy(p == "error" ? FallbackPolicy::kError : p == "silent" ? FallbackPolicy::kSilent : FallbackPolicy::kWarn);
  });
  m.def("_get_fallback_policy", [] {
    auto p = fallback_policy();
    return std::string(p == FallbackPolicy::kError ? "error" : p == FallbackPolicy::kSilent ? "silent" : "warn");
  });
  // Waits until every launch queued on the dispatch thread has been handed to PJRT (not for the runs).
  m.def("_drain_launches", [] {
    py::gil_scoped_release no_gil;
    pjrt::Executable::drain();
  });
  m.def("_set_launch_blocking", &set_launch_blocking);
  m.def("_launch_blocking", &launch_blocking);
  m.def("_get_default_generator", [](int d) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(default_generator(d)));
  });
}
