#include "distributed/backend.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include "aten/fused.h"
#include "aten/storage.h"

namespace torch_pjrt::distributed {

namespace {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using Works = std::vector<WorkPtr>;

std::string shape_of(const at::Tensor& t) { return std::string(c10::toString(t.scalar_type())) + c10::str(t.sizes()); }

std::string shapes_of(const std::vector<at::Tensor>& ts) {
  std::string s;
  for (const auto& t : ts) s += (s.empty() ? "" : ", ") + shape_of(t);
  return s;
}

// Without dim 0, which may differ between ranks (alltoall's uneven splits).
std::string rows_of(const at::Tensor& t) {
  std::string s = std::string(c10::toString(t.scalar_type())) + "[*";
  for (int64_t i = 1; i < t.dim(); ++i) s += ", " + std::to_string(t.size(i));
  return s + "]";
}

std::string message_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown error";
  }
}

std::exception_ptr backend_error(const std::string& msg) {
  return std::make_exception_ptr(c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, msg));
}

// A Work completed through its future. torch's Work::create_from_future waits without rethrowing the future's
// error, so a collective that failed on the host (gloo's timeout) would return as if done: this one raises.
class FutureWork final : public c10d::Work {
 public:
  explicit FutureWork(c10::intrusive_ptr<c10::ivalue::Future> future)
      : c10d::Work(-1, c10d::OpType::UNKNOWN), future_(std::move(future)) {}
  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override {
    return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
  }
  std::vector<at::Tensor> result() override { return future_->value().toTensorVector(); }
  // The host library's own timeout (the group's) bounds the wait.
  bool wait(std::chrono::milliseconds) override {
    future_->wait();
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

template <typename T>
T reduce_opts(const T& opts, c10d::ReduceOp op) {
  T o = opts;
  o.reduceOp = op;
  return o;
}

}  // namespace

TpuBackend::TpuBackend(Group group, c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::Backend> host,
                       std::vector<int> devices)
    : c10d::Backend(group.rank, group.size),
      group_(std::move(group)),
      store_(std::move(store)),
      host_(std::move(host)),
      agreement_(store_, group_) {
  TORCH_CHECK(host_, "tpu_dist: no host backend");
  if (!devices.empty()) {
    TORCH_CHECK((int)devices.size() == group_.size, "tpu_dist: ", devices.size(), " devices for a group of ",
                group_.size);
    programs_ = std::make_unique<ProgramTransport>(std::move(devices), group_.rank, std::hash<std::string>()(group_.name));
  }
}

TpuBackend::~TpuBackend() = default;

WorkPtr TpuBackend::done(std::vector<at::Tensor> outputs) {
  counters().collectives++;
  counters().program_collectives++;
  auto result = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  result->markCompleted(c10::IValue(std::move(outputs)));
  return c10::make_intrusive<FutureWork>(result);
}

void TpuBackend::setTimeout(std::chrono::milliseconds timeout) {
  group_.timeout = timeout;
  host_->setTimeout(timeout);
}

void TpuBackend::check_tensors(const char* collective, const std::vector<at::Tensor>& tensors) const {
  for (const auto& t : tensors) {
    TORCH_CHECK(t.defined(), "tpu_dist: ", collective, ": an undefined tensor");
    TORCH_CHECK(t.layout() == at::kStrided, "tpu_dist: ", collective, " takes dense tensors, not ", t.layout(), " (",
                shape_of(t), ")");
    auto type = t.device().type();
    TORCH_CHECK(type == c10::DeviceType::PrivateUse1 || type == c10::DeviceType::CPU, "tpu_dist: ", collective,
                " takes tpu (or cpu) tensors, not a tensor on ", t.device(), " (", shape_of(t), ")");
    // A collective is a sync point: a failure pending on a tensor raises here, before this rank joins the
    // others (which then report it as missing within the timeout rather than wait in the collective).
    if (type == c10::DeviceType::PrivateUse1) raise_if_poisoned(handle_of(t));
  }
}

void TpuBackend::before(const char* collective, const std::string& call) {
  // A collective is a sync point: the pending fused stream runs first, so what a rank fused around it
  // never decides what other ranks wait for.
  if (fused::active()) fused::flush();
  agreement_.check(collective, call);
}

WorkPtr TpuBackend::run(const char* collective, std::vector<at::Tensor> outputs, const std::function<Works()>& start,
                        std::function<void()> finish) {
  counters().collectives++;
  std::string where = std::string("tpu_dist: ") + collective + " on " + group_.describe() + " failed on global rank " +
                      std::to_string(group_.global_rank(group_.rank)) + ": ";
  Works works;
  try {
    works = start();
  } catch (...) {
    std::rethrow_exception(backend_error(where + message_of(std::current_exception())));
  }
  auto result = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  auto complete = [result, outputs, finish = std::move(finish), where](std::exception_ptr error) {
    if (!error) {
      try {
        finish();
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (error)
      result->setError(backend_error(where + message_of(error)));
    else
      result->markCompleted(c10::IValue(outputs));
  };
  c10::List<c10::intrusive_ptr<c10::ivalue::Future>> futures(c10::FutureType::create(c10::AnyType::get()));
  std::exception_ptr error;
  for (auto& w : works) {
    c10::intrusive_ptr<c10::ivalue::Future> f;
    try {
      f = w->getFuture();
    } catch (const c10::Error&) {
      // Some of gloo's works (its all-gather and reduce-scatter into one tensor) have no future: waited for here.
    }
    if (f) {
      futures.push_back(f);
      continue;
    }
    try {
      w->wait(group_.timeout);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error || futures.empty()) {
    complete(error);
  } else {
    c10::collectAll(futures)->addCallback(
        [complete](c10::ivalue::Future& f) { complete(f.hasError() ? f.exception_ptr() : nullptr); });
  }
  return c10::make_intrusive<FutureWork>(result);
}

WorkPtr TpuBackend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  check_tensors("broadcast", tensors);
  before("broadcast", "broadcast(root=" + std::to_string(opts.rootRank) + ") " + shapes_of(tensors));
  if (programs_ && tensors.size() == 1 && programs_->broadcast(tensors[0], opts.rootRank)) return done(tensors);
  bool root = group_.rank == opts.rootRank;
  std::vector<Wire> wires;
  std::vector<at::Tensor> hosts;
  for (const auto& t : tensors) {
    wires.push_back(wire_of(t, Use::kMove, c10d::ReduceOp(), "broadcast"));
    hosts.push_back(root ? to_host(t, wires.back()) : host_buffer(t, wires.back()));
  }
  return run(
      "broadcast", tensors, [&] { return Works{host_->broadcast(hosts, opts)}; },
      [root, hosts, wires, tensors]() mutable {
        if (!root)
          for (size_t i = 0; i < tensors.size(); ++i) to_device(hosts[i], wires[i], tensors[i]);
      });
}

WorkPtr TpuBackend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  check_tensors("allreduce", tensors);
  c10d::ReduceOp op = opts.reduceOp;
  before("allreduce", "allreduce(" + reduce_op_name(op) + ") " + shapes_of(tensors));
  if (programs_ && tensors.size() == 1 && programs_->allreduce(tensors[0], op)) return done(tensors);
  std::vector<Wire> wires;
  std::vector<at::Tensor> hosts;
  for (const auto& t : tensors) {
    wires.push_back(wire_of(t, Use::kReduce, op, "allreduce"));
    hosts.push_back(to_host(t, wires.back()));
    premultiply(hosts.back(), op);
  }
  // gloo reduces a list of tensors as one (they are a single process's devices): one call each.
  return run(
      "allreduce", tensors,
      [&] {
        Works works;
        for (size_t i = 0; i < hosts.size(); ++i) {
          std::vector<at::Tensor> one{hosts[i]};
          works.push_back(host_->allreduce(one, reduce_opts(opts, gloo_op(op, wires[i].dtype))));
        }
        return works;
      },
      [hosts, wires, tensors, op, n = group_.size]() mutable {
        for (size_t i = 0; i < tensors.size(); ++i) {
          finish_average(hosts[i], op, wires[i], n);
          to_device(hosts[i], wires[i], tensors[i]);
        }
      });
}

WorkPtr TpuBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return allreduce(tensors, opts);
}

WorkPtr TpuBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  check_tensors("reduce", tensors);
  c10d::ReduceOp op = opts.reduceOp;
  before("reduce", "reduce(" + reduce_op_name(op) + ", root=" + std::to_string(opts.rootRank) + ") " + shapes_of(tensors));
  bool root = group_.rank == opts.rootRank;
  std::vector<Wire> wires;
  std::vector<at::Tensor> hosts;
  for (const auto& t : tensors) {
    wires.push_back(wire_of(t, Use::kReduce, op, "reduce"));
    hosts.push_back(to_host(t, wires.back()));
    premultiply(hosts.back(), op);
  }
  return run(
      "reduce", tensors,
      [&] {
        Works works;
        for (size_t i = 0; i < hosts.size(); ++i) {
          std::vector<at::Tensor> one{hosts[i]};
          works.push_back(host_->reduce(one, reduce_opts(opts, gloo_op(op, wires[i].dtype))));
        }
        return works;
      },
      [root, hosts, wires, tensors, op, n = group_.size]() mutable {
        if (!root) return;
        for (size_t i = 0; i < tensors.size(); ++i) {
          finish_average(hosts[i], op, wires[i], n);
          to_device(hosts[i], wires[i], tensors[i]);
        }
      });
}

WorkPtr TpuBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) {
  check_tensors("allgather", inputs);
  TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: allgather: ", outputs.size(), " output lists for ",
              inputs.size(), " inputs");
  std::vector<at::Tensor> flat;
  bool uneven = false;  // outputs of different sizes in one list: each rank's input broadcast from it
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto& list = outputs[i];
    TORCH_CHECK((int)list.size() == group_.size, "tpu_dist: allgather: an output list of ", list.size(),
                " tensors for a group of ", group_.size);
    check_tensors("allgather", list);
    for (const auto& o : list) uneven |= !o.sizes().equals(list[0].sizes());
    TORCH_CHECK(list[group_.rank].sizes().equals(inputs[i].sizes()) &&
                    list[group_.rank].scalar_type() == inputs[i].scalar_type(),
                "tpu_dist: allgather: the input (", shape_of(inputs[i]), ") must have the shape and dtype of rank ",
                group_.rank, "'s output (", shape_of(list[group_.rank]), ")");
    flat.insert(flat.end(), list.begin(), list.end());
  }
  // the ranks agree on the outputs' shapes (the same everywhere, where the inputs may differ)
  before("allgather", "allgather " + (uneven ? "into " + shapes_of(flat) : shapes_of(inputs)));
  std::vector<Wire> in_wires, out_wires;
  std::vector<at::Tensor> host_in;
  std::vector<std::vector<at::Tensor>> host_out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in_wires.push_back(wire_of(inputs[i], Use::kMove, c10d::ReduceOp(), "allgather"));
    host_in.push_back(to_host(inputs[i], in_wires.back()));
    host_out.emplace_back();
    for (auto& o : outputs[i]) {
      out_wires.push_back(wire_of(o, Use::kMove, c10d::ReduceOp(), "allgather"));
      host_out.back().push_back(host_buffer(o, out_wires.back()));
    }
  }
  return run(
      "allgather", flat,
      [&] {
        Works works;
        for (size_t i = 0; i < host_in.size(); ++i) {
          if (uneven) {  // gloo gathers equal sizes only: a broadcast from each rank, as NCCL's backend does
            host_out[i][group_.rank].copy_(host_in[i]);
            for (int r = 0; r < group_.size; ++r) {
              std::vector<at::Tensor> one{host_out[i][r]};
              c10d::BroadcastOptions b;
              b.rootRank = r;
              b.timeout = opts.timeout;
              works.push_back(host_->broadcast(one, b));
            }
            continue;
          }
          std::vector<std::vector<at::Tensor>> outs{host_out[i]};
          std::vector<at::Tensor> ins{host_in[i]};
          works.push_back(host_->allgather(outs, ins, opts));
        }
        return works;
      },
      [host_out, out_wires, flat]() mutable {
        size_t k = 0;
        for (auto& list : host_out)
          for (auto& h : list) {
            to_device(h, out_wires[k], flat[k]);
            ++k;
          }
      });
}

WorkPtr TpuBackend::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  check_tensors("all_gather_into_tensor", {output, input});
  TORCH_CHECK(output.numel() == input.numel() * group_.size && output.scalar_type() == input.scalar_type(),
              "tpu_dist: all_gather_into_tensor: the output (", shape_of(output), ") must hold ", group_.size,
              " inputs (", shape_of(input), ") of its dtype");
  before("all_gather_into_tensor", "all_gather_into_tensor " + shape_of(input) + " -> " + shape_of(output));
  if (programs_ && programs_->allgather_into(output, input)) return done({output});
  Wire in_w = wire_of(input, Use::kMove, c10d::ReduceOp(), "all_gather_into_tensor");
  Wire out_w = wire_of(output, Use::kMove, c10d::ReduceOp(), "all_gather_into_tensor");
  at::Tensor host_in = to_host(input, in_w), host_out = host_buffer(output, out_w);
  return run(
      "all_gather_into_tensor", {output},
      [&] {
        // gloo gathers flat buffers: the byte form of each keeps the element count ratio.
        at::Tensor o = host_out.reshape({-1}), i = host_in.reshape({-1});
        return Works{host_->_allgather_base(o, i, opts)};
      },
      [host_out, out_w, output]() mutable { to_device(host_out, out_w, output); });
}

WorkPtr TpuBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::AllgatherOptions& opts) {
  return allgather(outputs, inputs, opts);
}

WorkPtr TpuBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                    const c10d::AllgatherOptions& opts) {
  check_tensors("all_gather_into_tensor_coalesced", inputs);
  check_tensors("all_gather_into_tensor_coalesced", outputs);
  TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: all_gather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  before("all_gather_into_tensor_coalesced", "all_gather_into_tensor_coalesced " + shapes_of(inputs));
  std::vector<Wire> out_w;
  std::vector<at::Tensor> host_in, host_out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * group_.size &&
                    outputs[i].scalar_type() == inputs[i].scalar_type(),
                "tpu_dist: all_gather_into_tensor_coalesced: output ", i, " (", shape_of(outputs[i]), ") must hold ",
                group_.size, " inputs (", shape_of(inputs[i]), ") of its dtype");
    host_in.push_back(to_host(inputs[i], wire_of(inputs[i], Use::kMove, c10d::ReduceOp(), "all_gather")));
    out_w.push_back(wire_of(outputs[i], Use::kMove, c10d::ReduceOp(), "all_gather"));
    host_out.push_back(host_buffer(outputs[i], out_w.back()));
  }
  return run(
      "all_gather_into_tensor_coalesced", outputs,
      [&] {
        Works works;
        for (size_t i = 0; i < host_in.size(); ++i) {
          at::Tensor o = host_out[i].reshape({-1}), in = host_in[i].reshape({-1});
          works.push_back(host_->_allgather_base(o, in, opts));
        }
        return works;
      },
      [host_out, out_w, outputs]() mutable {
        for (size_t i = 0; i < outputs.size(); ++i) to_device(host_out[i], out_w[i], outputs[i]);
      });
}

WorkPtr TpuBackend::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                           const c10d::GatherOptions& opts) {
  check_tensors("gather", inputs);
  bool root = group_.rank == opts.rootRank;
  std::vector<at::Tensor> flat;
  for (auto& list : outputs) flat.insert(flat.end(), list.begin(), list.end());
  check_tensors("gather", flat);
  before("gather", "gather(root=" + std::to_string(opts.rootRank) + ") " + shapes_of(inputs));
  std::vector<at::Tensor> host_in;
  for (auto& t : inputs) host_in.push_back(to_host(t, wire_of(t, Use::kMove, c10d::ReduceOp(), "gather")));
  std::vector<Wire> out_w;
  std::vector<std::vector<at::Tensor>> host_out;
  if (root)
    for (auto& list : outputs) {
      host_out.emplace_back();
      for (auto& o : list) {
        out_w.push_back(wire_of(o, Use::kMove, c10d::ReduceOp(), "gather"));
        host_out.back().push_back(host_buffer(o, out_w.back()));
      }
    }
  return run(
      "gather", flat, [&] { return Works{host_->gather(host_out, host_in, opts)}; },
      [host_out, out_w, flat]() mutable {
        size_t k = 0;
        for (auto& list : host_out)
          for (auto& h : list) {
            to_device(h, out_w[k], flat[k]);
            ++k;
          }
      });
}

WorkPtr TpuBackend::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                            const c10d::ScatterOptions& opts) {
  check_tensors("scatter", outputs);
  bool root = group_.rank == opts.rootRank;
  before("scatter", "scatter(root=" + std::to_string(opts.rootRank) + ") " + shapes_of(outputs));
  std::vector<std::vector<at::Tensor>> host_in;
  if (root)
    for (auto& list : inputs) {
      check_tensors("scatter", list);
      host_in.emplace_back();
      for (auto& t : list) host_in.back().push_back(to_host(t, wire_of(t, Use::kMove, c10d::ReduceOp(), "scatter")));
    }
  std::vector<Wire> out_w;
  std::vector<at::Tensor> host_out;
  for (auto& o : outputs) {
    out_w.push_back(wire_of(o, Use::kMove, c10d::ReduceOp(), "scatter"));
    host_out.push_back(host_buffer(o, out_w.back()));
  }
  return run(
      "scatter", outputs, [&] { return Works{host_->scatter(host_out, host_in, opts)}; },
      [host_out, out_w, outputs]() mutable {
        for (size_t i = 0; i < outputs.size(); ++i) to_device(host_out[i], out_w[i], outputs[i]);
      });
}

WorkPtr TpuBackend::reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                   const c10d::ReduceScatterOptions& opts) {
  check_tensors("reduce_scatter", outputs);
  c10d::ReduceOp op = opts.reduceOp;
  TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: reduce_scatter: ", outputs.size(), " outputs for ",
              inputs.size(), " input lists");
  before("reduce_scatter", "reduce_scatter(" + reduce_op_name(op) + ") " + shapes_of(outputs));
  std::vector<Wire> out_w;
  std::vector<at::Tensor> host_out;
  std::vector<std::vector<at::Tensor>> host_in;
  for (size_t i = 0; i < outputs.size(); ++i) {
    TORCH_CHECK((int)inputs[i].size() == group_.size, "tpu_dist: reduce_scatter: an input list of ", inputs[i].size(),
                " tensors for a group of ", group_.size);
    check_tensors("reduce_scatter", inputs[i]);
    out_w.push_back(wire_of(outputs[i], Use::kReduce, op, "reduce_scatter"));
    host_out.push_back(host_buffer(outputs[i], out_w.back()));
    host_in.emplace_back();
    for (auto& t : inputs[i]) {
      host_in.back().push_back(to_host(t, wire_of(t, Use::kReduce, op, "reduce_scatter")));
      premultiply(host_in.back().back(), op);
    }
  }
  return run(
      "reduce_scatter", outputs,
      [&] {
        Works works;
        for (size_t i = 0; i < host_out.size(); ++i) {
          std::vector<at::Tensor> outs{host_out[i]};
          std::vector<std::vector<at::Tensor>> ins{host_in[i]};
          works.push_back(host_->reduce_scatter(outs, ins, reduce_opts(opts, gloo_op(op, out_w[i].dtype))));
        }
        return works;
      },
      [host_out, out_w, outputs, op, n = group_.size]() mutable {
        for (size_t i = 0; i < outputs.size(); ++i) {
          finish_average(host_out[i], op, out_w[i], n);
          to_device(host_out[i], out_w[i], outputs[i]);
        }
      });
}

WorkPtr TpuBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outs{output}, ins{input};
  return reduce_scatter_tensor_coalesced(outs, ins, opts);
}

WorkPtr TpuBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                    const c10d::ReduceScatterOptions& opts) {
  const char* name = outputs.size() == 1 ? "reduce_scatter_tensor" : "reduce_scatter_tensor_coalesced";
  check_tensors(name, inputs);
  check_tensors(name, outputs);
  c10d::ReduceOp op = opts.reduceOp;
  TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: ", name, ": ", outputs.size(), " outputs for ", inputs.size(),
              " inputs");
  for (size_t i = 0; i < inputs.size(); ++i)
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * group_.size &&
                    outputs[i].scalar_type() == inputs[i].scalar_type(),
                "tpu_dist: ", name, ": the input (", shape_of(inputs[i]), ") must hold ", group_.size, " outputs (",
                shape_of(outputs[i]), ") of its dtype");
  before(name, std::string(name) + "(" + reduce_op_name(op) + ") " + shapes_of(inputs));
  if (programs_ && inputs.size() == 1 && programs_->reduce_scatter_into(outputs[0], inputs[0], op)) return done(outputs);
  std::vector<Wire> out_w;
  std::vector<at::Tensor> host_in, host_out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    host_in.push_back(to_host(inputs[i], wire_of(inputs[i], Use::kReduce, op, name)));
    premultiply(host_in.back(), op);
    out_w.push_back(wire_of(outputs[i], Use::kReduce, op, name));
    host_out.push_back(host_buffer(outputs[i], out_w.back()));
  }
  return run(
      name, outputs,
      [&] {
        Works works;
        for (size_t i = 0; i < host_in.size(); ++i) {
          // gloo splits a flat input into the group's equal parts.
          at::Tensor o = host_out[i].reshape({-1}), in = host_in[i].reshape({-1});
          works.push_back(host_->_reduce_scatter_base(o, in, reduce_opts(opts, gloo_op(op, out_w[i].dtype))));
        }
        return works;
      },
      [host_out, out_w, outputs, op, n = group_.size]() mutable {
        for (size_t i = 0; i < outputs.size(); ++i) {
          finish_average(host_out[i], op, out_w[i], n);
          to_device(host_out[i], out_w[i], outputs[i]);
        }
      });
}

WorkPtr TpuBackend::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                  std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  check_tensors("all_to_all_single", {output, input});
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "tpu_dist: all_to_all_single: output ", shape_of(output),
              " and input ", shape_of(input), " differ in dtype");
  before("all_to_all_single", "all_to_all_single " + rows_of(input) + " -> " + rows_of(output));
  bool equal = output_splits.empty() && input_splits.empty();  // torch passes no splits for equal ones
  if (programs_ && equal && programs_->alltoall_equal(output, input)) return done({output});
  Wire in_w = wire_of(input, Use::kMove, c10d::ReduceOp(), "all_to_all_single");
  Wire out_w = wire_of(output, Use::kMove, c10d::ReduceOp(), "all_to_all_single");
  at::Tensor host_in = to_host(input, in_w), host_out = host_buffer(output, out_w);
  return run(
      "all_to_all_single", {output},
      [&] { return Works{host_->alltoall_base(host_out, host_in, output_splits, input_splits, opts)}; },
      [host_out, out_w, output]() mutable { to_device(host_out, out_w, output); });
}

WorkPtr TpuBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                             const c10d::AllToAllOptions& opts) {
  check_tensors("all_to_all", inputs);
  check_tensors("all_to_all", outputs);
  TORCH_CHECK((int)inputs.size() == group_.size && (int)outputs.size() == group_.size, "tpu_dist: all_to_all: ",
              inputs.size(), " inputs and ", outputs.size(), " outputs for a group of ", group_.size);
  std::string in_dtypes;
  for (auto& t : inputs) in_dtypes += std::string(in_dtypes.empty() ? "" : ", ") + c10::toString(t.scalar_type());
  before("all_to_all", "all_to_all of " + std::to_string(inputs.size()) + " tensors (" + in_dtypes + ")");
  // The tensors may differ in size per peer (gloo's list form takes only equal ones): their bytes go as one
  // all_to_all_single of bytes with uneven splits.
  std::vector<int64_t> in_splits, out_splits;
  std::vector<at::Tensor> parts;
  for (auto& t : inputs) {
    parts.push_back(to_host(t, Wire{t.scalar_type(), t.sizes().vec(), Wire::kBytes}).reshape({-1}));
    in_splits.push_back(parts.back().numel());
  }
  std::vector<Wire> out_w;
  for (auto& o : outputs) {
    out_w.push_back(Wire{o.scalar_type(), o.sizes().vec(), Wire::kBytes});
    out_splits.push_back(o.nbytes());
  }
  at::Tensor host_in = at::cat(parts);
  int64_t total = 0;
  for (int64_t n : out_splits) total += n;
  at::Tensor host_out = at::empty({total}, at::TensorOptions().dtype(at::kByte));
  return run(
      "all_to_all", outputs,
      [&] { return Works{host_->alltoall_base(host_out, host_in, out_splits, in_splits, opts)}; },
      [host_out, out_w, out_splits, outputs]() mutable {
        int64_t offset = 0;
        for (size_t i = 0; i < outputs.size(); ++i) {
          at::Tensor bytes = host_out.narrow(0, offset, out_splits[i]);
          offset += out_splits[i];
          to_device(bytes, out_w[i], outputs[i]);
        }
      });
}

namespace {

// Point-to-point work: gloo's send and recv works have no future, so the copy back of a recv happens in
// wait(), on the waiting thread. Nothing blocks at the call: both ranks may post a send before their recv
// (batch_isend_irecv).
class P2PWork final : public c10d::Work {
 public:
  P2PWork(WorkPtr gloo, std::string where, std::function<void()> finish)
      : c10d::Work(-1, c10d::OpType::UNKNOWN), gloo_(std::move(gloo)), where_(std::move(where)),
        finish_(std::move(finish)) {}
  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!completed_) {
      try {
        gloo_->wait(timeout);
        finish_();
      } catch (...) {
        exception_ = backend_error(where_ + message_of(std::current_exception()));
      }
      completed_ = true;
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

 private:
  WorkPtr gloo_;
  std::string where_;
  std::function<void()> finish_;
};

}  // namespace

WorkPtr TpuBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_tensors("send", tensors);
  if (fused::active()) fused::flush();
  counters().collectives++;
  std::vector<at::Tensor> hosts;
  for (auto& t : tensors) hosts.push_back(to_host(t, wire_of(t, Use::kMove, c10d::ReduceOp(), "send")));
  std::string where = "tpu_dist: send to group rank " + std::to_string(dst) + " of " + group_.describe() +
                      " failed on global rank " + std::to_string(group_.global_rank(group_.rank)) + ": ";
  return c10::make_intrusive<P2PWork>(host_->send(hosts, dst, tag), where, [hosts] {});
}

WorkPtr TpuBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_tensors("recv", tensors);
  if (fused::active()) fused::flush();
  counters().collectives++;
  std::vector<Wire> wires;
  std::vector<at::Tensor> hosts;
  for (auto& t : tensors) {
    wires.push_back(wire_of(t, Use::kMove, c10d::ReduceOp(), "recv"));
    hosts.push_back(host_buffer(t, wires.back()));
  }
  std::string where = "tpu_dist: recv from group rank " + std::to_string(src) + " of " + group_.describe() +
                      " failed on global rank " + std::to_string(group_.global_rank(group_.rank)) + ": ";
  return c10::make_intrusive<P2PWork>(host_->recv(hosts, src, tag), where, [hosts, wires, tensors]() mutable {
    for (size_t i = 0; i < tensors.size(); ++i) to_device(hosts[i], wires[i], tensors[i]);
  });
}

WorkPtr TpuBackend::barrier(const c10d::BarrierOptions& opts) {
  before("barrier", "barrier");
  return run("barrier", {}, [&] { return Works{host_->barrier(opts)}; }, [] {});
}

}  // namespace torch_pjrt::distributed
