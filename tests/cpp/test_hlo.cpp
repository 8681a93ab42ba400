// The hlo builder and the in-program view model, compiled and run on the CPU plugin; results checked
// against values computed here by hand.
#include <cstring>
#include <numeric>

#include "check.h"
#include "hlo/builder.h"
#include "lowering/view.h"
#include "plugin_fixture.h"

using hlo::Builder;
using hlo::Type;
using hlo::Value;
using pjrt::ElementType;

namespace {

struct Program {
  Builder b;
  std::vector<pjrt::TensorSpec> in;
  Value arg(ElementType t, hlo::Dims d) {
    in.push_back({t, d});
    return b.arg(Type{t, d});
  }
  // Compiles with `results` as outputs and runs on device 0 with the given host inputs.
  std::vector<pjrt::BufferPtr> run(const std::vector<Value>& results, const std::vector<const void*>& host) {
    std::vector<pjrt::TensorSpec> out;
    for (const auto& r : results) out.push_back({r.elem(), r.dims()});
    b.ret(results);
    auto& c = test_client();
    auto exe = c.compile(b.module_text(), in, out);
    std::vector<pjrt::BufferPtr> keep;
    std::vector<const pjrt::Buffer*> args;
    for (size_t i = 0; i < in.size(); ++i) {
      keep.push_back(c.from_host(host[i], in[i].type, in[i].dims, 0));
      args.push_back(keep.back().get());
    }
    return exe->execute(0, args, "test");
  }
};

template <class T>
std::vector<T> read(const pjrt::BufferPtr& b) {
  std::vector<T> v(b->numel());
  b->to_host(v.data());
  return v;
}

std::vector<float> iota_f(int n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

}  // namespace

TEST(reduce_and_broadcast) {
  Program p;
  Value x = p.arg(ElementType::kF32, {2, 3});
  Value rows = p.b.reduce({x}, {p.b.scalar(0, ElementType::kF32)}, {1},
                          [](Builder& b, const std::vector<Value>& a) { return std::vector<Value>{b.binary("add", a[0], a[1])}; })[0];
  Value centered = p.b.binary("subtract", x, p.b.broadcast_in_dim(rows, {2, 3}, {0}));
  auto host = iota_f(6);
  auto out = p.run({rows, centered}, {host.data()});
  auto r = read<float>(out[0]);
  CHECK(r[0] == 3 && r[1] == 12);
  auto c = read<float>(out[1]);
  CHECK(c[0] == -3 && c[5] == -7);
}

TEST(dot_general_batched) {
  Program p;
  Value a = p.arg(ElementType::kF32, {2, 2, 3});
  Value b = p.arg(ElementType::kF32, {2, 3, 1});
  Value d = p.b.dot_general(a, b, {0}, {0}, {2}, {1}, ElementType::kF32);
  CHECK(d.dims() == (hlo::Dims{2, 2, 1}));
  auto ha = iota_f(12);
  std::vector<float> hb(6, 1.0f);
  auto r = read<float>(p.run({d}, {ha.data(), hb.data()})[0]);
  CHECK(r[0] == 0 + 1 + 2 && r[3] == 9 + 10 + 11);
}

TEST(compare_select_convert) {
  Program p;
  Value x = p.arg(ElementType::kF32, {4});
  Value pos = p.b.compare(hlo::Cmp::GT, x, p.b.constant(1.5, x.type));
  Value y = p.b.select(pos, x, p.b.constant(-1, x.type));
  Value i = p.b.convert(y, ElementType::kS32);
  std::vector<float> h{0.5f, 1.5f, 2.5f, 3.5f};
  auto out = p.run({y, i}, {h.data()});
  auto f = read<float>(out[0]);
  auto n = read<int32_t>(out[1]);
  CHECK(f[0] == -1 && f[1] == -1 && f[2] == 2.5f);
  CHECK(n[3] == 3);  // truncation toward zero
}

TEST(sort_gather_scatter) {
  Program p;
  Value x = p.arg(ElementType::kF32, {5});
  Value sorted = p.b.sort({x}, 0, true, [](Builder& b, const std::vector<Value>& a) {
    return std::vector<Value>{b.compare(hlo::Cmp::LT, a[0], a[1])};
  })[0];
  Value idx = p.b.reshape(p.b.constant_i(3, Type{ElementType::kS64, {2}}), {2, 1});
  Value g = p.b.gather(x, idx, hlo::GatherDims{{}, {0}, {0}, 1}, {1}, {2});
  Value upd = p.b.constant(10, Type{ElementType::kF32, {2}});
  Value s = p.b.scatter(x, idx, upd, hlo::ScatterDims{{}, {0}, {0}, 1},
                        [](Builder& b, const std::vector<Value>& a) { return std::vector<Value>{b.binary("add", a[0], a[1])}; });
  std::vector<float> h{3, 1, 4, 1.5f, 9};
  auto out = p.run({sorted, g, s}, {h.data()});
  auto so = read<float>(out[0]);
  CHECK(so[0] == 1 && so[1] == 1.5f && so[4] == 9);
  auto go = read<float>(out[1]);
  CHECK(go[0] == 1.5f && go[1] == 1.5f);
  auto sc = read<float>(out[2]);
  CHECK(sc[3] == 21.5f && sc[0] == 3);  // both updates hit index 3
}

TEST(constants_are_exact) {
  Program p;
  Value x = p.arg(ElementType::kF64, {});
  Value c = p.b.constant(0.1, Type{ElementType::kF64, {}});
  double h = 0;
  auto r = read<double>(p.run({p.b.binary("add", x, c)}, {&h})[0]);
  CHECK(r[0] == 0.1);
}

// View reads: transposes, strided slices, broadcasts, and a gather for overlapping strides.
TEST(view_reads_match_strided_indexing) {
  struct Case {
    hlo::Dims sizes, strides;
    int64_t offset;
  };
  std::vector<Case> cases = {
      {{3, 4}, {4, 1}, 0},  // the base itself
      {{4, 3}, {1, 4}, 0},  // transpose
      {{2, 2}, {8, 2}, 1},  // strided slice with offset
      {{3, 4}, {0, 1}, 4},  // broadcast rows
      {{3, 3}, {1, 1}, 2},  // overlapping windows (gather path)
      {{2, 2}, {4, 1}, 6},  // the span runs past the end of the base (padding path)
  };
  for (const auto& k : cases) {
    Program p;
    Value base = p.arg(ElementType::kF32, {3, 4});
    lowering::BaseForm form{true, ElementType::kF32, {3, 4}, 48};
    lowering::ViewForm view{ElementType::kF32, k.sizes, k.strides, k.offset};
    Value v = lowering::read_view(p.b, base, form, view);
    auto h = iota_f(12);
    auto r = read<float>(p.run({v}, {h.data()})[0]);
    size_t i = 0;
    for (int64_t a = 0; a < k.sizes[0]; ++a)
      for (int64_t b = 0; b < k.sizes[1]; ++b) {
        float want = h[k.offset + a * k.strides[0] + b * k.strides[1]];
        if (r[i] != want) std::printf("  view %ldx%ld strides %ld,%ld offset %ld: [%ld,%ld] = %g, want %g\n", k.sizes[0], k.sizes[1], k.strides[0], k.strides[1], k.offset, a, b, r[i], want);
        CHECK(r[i++] == want);
      }
  }
}

TEST(view_write_scatters_into_base) {
  Program p;
  Value base = p.arg(ElementType::kF32, {3, 4});
  lowering::BaseForm form{true, ElementType::kF32, {3, 4}, 48};
  lowering::ViewForm col{ElementType::kF32, {3}, {4}, 1};  // column 1
  lowering::BaseForm after;
  Value nb = lowering::write_view(p.b, base, form, col, p.b.constant(-1, Type{ElementType::kF32, {3}}), &after);
  CHECK(after.dims == (hlo::Dims{3, 4}));
  auto h = iota_f(12);
  auto r = read<float>(p.run({nb}, {h.data()})[0]);
  CHECK(r[1] == -1 && r[5] == -1 && r[9] == -1 && r[0] == 0 && r[2] == 2);
}

// View writes: each view of a [4, 6] base written with distinct values, against strided indexing on the
// host; views whose strides nest are written through their box (no scatter in the program), others by a
// scatter.
TEST(view_writes_match_strided_indexing) {
  struct Case {
    hlo::Dims sizes, strides;
    int64_t offset;
    bool scatter;  // expected in the program
  };
  std::vector<Case> cases = {
      {{4, 3}, {6, 1}, 3, false},  // the last 3 columns (narrow at an offset)
      {{4, 3}, {6, 1}, 0, false},  // the first 3
      {{6, 4}, {1, 6}, 0, false},  // the transpose
      {{2, 3}, {12, 2}, 1, false},  // every other row and column, from (0, 1)
      {{3, 2}, {1, 12}, 7, false},  // a transposed strided slice
      {{2, 1, 3}, {6, 5, 1}, 15, false},  // a size-1 dim between; the span runs past the end (padded)
      {{1, 3}, {1, 1}, 20, false},  // contiguous: a dynamic_update_slice
      {{2, 2}, {3, 2}, 1, true},  // strides that do not nest: the scatter
  };
  for (const auto& k : cases) {
    Program p;
    Value base = p.arg(ElementType::kF32, {4, 6});
    lowering::BaseForm form{true, ElementType::kF32, {4, 6}, 96}, after;
    lowering::ViewForm view{ElementType::kF32, k.sizes, k.strides, k.offset};
    int64_t n = 1;
    for (int64_t d : k.sizes) n *= d;
    Value upd = p.b.binary("add", p.b.reshape(p.b.iota(Type{ElementType::kF32, {n}}, 0), k.sizes),
                           p.b.constant(100, Type{ElementType::kF32, k.sizes}));
    Value w = lowering::write_view(p.b, base, form, view, upd, &after);
    CHECK(after.dims == (hlo::Dims{4, 6}));
    auto h = iota_f(24);
    std::vector<float> want = h;
    for (int64_t i = 0; i < n; ++i) {  // element i of the view, in row-major order
      int64_t at = k.offset, rest = i;
      for (int64_t d = static_cast<int64_t>(k.sizes.size()) - 1; d >= 0; --d) {
        at += rest % k.sizes[d] * k.strides[d];
        rest /= k.sizes[d];
      }
      want[at] = 100.0f + static_cast<float>(i);
    }
    auto r = read<float>(p.run({w}, {h.data()})[0]);
    if (r != want) std::printf("  view offset %ld differs\n", k.offset);
    CHECK(r == want);
    const bool scatters = p.b.module_text().find("scatter") != std::string::npos;
    if (scatters != k.scatter) std::printf("  view offset %ld: scatter %d\n", k.offset, scatters);
    CHECK(scatters == k.scatter);
  }
}

TEST(view_dtype_reinterpret) {
  Program p;
  Value base = p.arg(ElementType::kF32, {2});
  lowering::BaseForm form{true, ElementType::kF32, {2}, 8};
  lowering::ViewForm bytes{ElementType::kU8, {8}, {1}, 0};
  lowering::ViewForm ints{ElementType::kS32, {2}, {1}, 0};
  Value u = lowering::read_view(p.b, base, form, bytes);
  Value i = lowering::read_view(p.b, base, form, ints);
  float h[2] = {1.0f, -2.0f};
  auto out = p.run({u, i}, {h});
  auto ub = read<uint8_t>(out[0]);
  CHECK(std::memcmp(ub.data(), h, 8) == 0);
  auto ib = read<int32_t>(out[1]);
  CHECK(std::memcmp(ib.data(), h, 8) == 0);
}

TEST(builder_rejects_mismatched_shapes) {
  Builder b;
  Value x = b.arg(Type{ElementType::kF32, {2}});
  Value y = b.arg(Type{ElementType::kF32, {3}});
  CHECK_THROWS(hlo::Error, b.binary("add", x, y), "operand types differ");
  CHECK_THROWS(hlo::Error, b.reshape(x, {3}), "reshape");
}

TEST(products_are_offered_with_their_transposes_folded) {
  // A hook that records what it is offered and takes only products whose b is transposed
  static std::vector<Builder::Product> seen;
  seen.clear();
  auto saved = Builder::product;
  Builder::product = [](Builder& b, const Builder::Product& p) {
    seen.push_back(p);
    if (!p.b_t) return Value{};
    hlo::Dims out(p.a.dims().begin(), p.a.dims().end() - 2);  // batch dims, then M (a's rows), N (b's rows)
    out.push_back(p.a.dims()[p.a.rank() - 2]);
    out.push_back(p.b.dims()[p.b.rank() - 2]);
    return b.custom_call("nt_product", {p.a, p.b}, {Type{p.result, out}})[0];
  };
  const ElementType f32 = ElementType::kF32;
  Builder b;
  Value x = b.arg(Type{f32, {8, 4}}), w = b.arg(Type{f32, {6, 4}}), g = b.arg(Type{f32, {8, 6}});
  Value y = b.dot_general(x, b.transpose(w, {1, 0}), {}, {}, {1}, {0}, f32);           // x w^T: w as stored
  Value dw = b.dot_general(b.transpose(g, {1, 0}), x, {}, {}, {1}, {0}, f32);          // g^T x: a_t
  Value dx = b.dot_general(g, w, {}, {}, {1}, {0}, f32);                               // g w: dense
  Value q = b.arg(Type{f32, {2, 3, 5, 4}}), k = b.arg(Type{f32, {2, 3, 7, 4}});
  Value s = b.dot_general(q, b.transpose(k, {0, 1, 3, 2}), {0, 1}, {0, 1}, {3}, {2}, f32);  // batched q k^T
  Value odd = b.dot_general(q, k, {0, 1}, {0, 1}, {3}, {3}, f32);  // contracting both last dims: b_t as given
  Value other = b.dot_general(b.transpose(k, {1, 0, 2, 3}), k, {0, 1}, {0, 1}, {3}, {3}, f32);  // not a swap of the last two
  Value outer = b.dot_general(x, w, {}, {}, {}, {}, f32);  // no contracting dim: not a product the hook sees
  b.ret({y, dw, dx, s, odd, other, outer});
  Builder::product = saved;
  CHECK(seen.size() == 6);
  CHECK(seen[0].a.id == x.id && seen[0].b.id == w.id && !seen[0].a_t && seen[0].b_t);
  CHECK(seen[1].a.id == g.id && seen[1].b.id == x.id && seen[1].a_t && !seen[1].b_t);
  CHECK(seen[2].a.id == g.id && seen[2].b.id == w.id && !seen[2].a_t && !seen[2].b_t);
  CHECK(seen[3].a.id == q.id && seen[3].b.id == k.id && !seen[3].a_t && seen[3].b_t);
  CHECK(seen[4].a.id == q.id && seen[4].b.id == k.id && seen[4].b_t);
  CHECK(seen[5].a.id != k.id && seen[5].b_t);
  CHECK(y.dims() == hlo::Dims({8, 6}) && s.dims() == hlo::Dims({2, 3, 5, 7}) && odd.dims() == hlo::Dims({2, 3, 5, 7}));
  const std::string text = b.module_text();
  size_t calls = 0;
  const std::string call = "\"nt_product\"";
  for (size_t at = text.find(call); at != std::string::npos; at = text.find(call, at + 1)) ++calls;
  CHECK(calls == 4);  // y, s, odd, other; dw and dx stay dots
  CHECK(text.find("stablehlo.dot_general") != std::string::npos);
}

TEST(sine_and_cosine_are_materialized_before_wide_broadcasts) {
  // A hook that marks what it materializes (the session's own makes a host kernel's copy on XLA:CPU)
  auto saved = Builder::materialize;
  Builder::materialize = [](Builder& b, Value v) { return b.unary("optimization_barrier", v); };
  auto count = [](const std::string& text) {
    size_t n = 0;
    for (size_t at = text.find("optimization_barrier"); at != std::string::npos; at = text.find("optimization_barrier", at + 1)) ++n;
    return n;
  };
  const ElementType f32 = ElementType::kF32;
  Builder b;
  Value t = b.arg(Type{f32, {32, 16}});
  // costly through elementwise and layout ops after the cosine
  Value c = b.reshape(b.binary("multiply", b.unary("cosine", t), t), {1, 32, 16});
  Value s = b.reshape(b.unary("sine", t), {1, 32, 16});
  Value e = b.reshape(b.unary("exponential", t), {1, 32, 16});  // XLA keeps exponentials out of such fusions
  Value wide = b.broadcast_in_dim(c, {16, 32, 16}, {0, 1, 2});   // 7680 more elements: materialized
  Value narrow = b.broadcast_in_dim(s, {8, 32, 16}, {0, 1, 2});  // 3584 more: computed in place
  Value other = b.broadcast_in_dim(e, {16, 32, 16}, {0, 1, 2});
  Value cs = b.broadcast_in_dim(b.reduce({c}, {b.scalar(0, f32)}, {2},
                                         [](Builder& bb, const std::vector<Value>& a) {
                                           return std::vector<Value>{bb.binary("add", a[0], a[1])};
                                         })[0],
                                {16, 32}, {0, 1});  // a reduction's result is a buffer anyway
  b.ret({wide, narrow, other, cs});
  Builder::materialize = saved;
  CHECK(count(b.module_text()) == 1);
}

// Builder::per_variant: a lowering that depends on the device is kept once per variant (here a negate
// in variant 0 and 0 - x in variant 1, standing in for a host kernel and its portable form); one that
// does not is emitted once. Both variants' modules compile and give the same values.
TEST(per_variant_keeps_one_text_per_variant) {
  const ElementType f32 = ElementType::kF32;
  const bool saved = Builder::two_variants;
  Builder::two_variants = true;
  Program p;
  Value x = p.arg(f32, {4});
  Value plain = p.b.per_variant([&] { return std::vector<Value>{p.b.binary("add", x, x)}; })[0];
  Value chosen = p.b.per_variant([&] {
    CHECK(hlo::lowering_variant() >= 0);
    if (hlo::lowering_variant() == 0) {
      hlo::note_variant_choice();
      return std::vector<Value>{p.b.unary("negate", x)};
    }
    return std::vector<Value>{p.b.binary("subtract", p.b.constant(0, Type{f32, {4}}), x)};
  })[0];
  Value y = p.b.binary("multiply", plain, chosen);
  Builder::two_variants = saved;
  CHECK(hlo::lowering_variant() == -1);
  CHECK(p.b.has_variants());
  p.b.ret({y});
  const std::string v0 = p.b.module_text("m", 0), v1 = p.b.module_text("m", 1);
  CHECK(v0.find("stablehlo.negate") != std::string::npos && v0.find("stablehlo.subtract") == std::string::npos);
  CHECK(v1.find("stablehlo.subtract") != std::string::npos && v1.find("stablehlo.negate") == std::string::npos);
  CHECK(v0.find("variant") == std::string::npos && v1.find("variant") == std::string::npos);
  auto count = [](const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  CHECK(count(v0, "stablehlo.add") == 1 && count(v1, "stablehlo.add") == 1);
  const float host[4] = {1, -2, 3, 0.5f};
  auto& c = test_client();
  for (const std::string* text : {&v0, &v1}) {
    auto exe = c.compile(*text, p.in, {{f32, {4}}});
    auto in = c.from_host(host, f32, {4}, 0);
    auto out = exe->execute(0, {in.get()}, "test");
    std::vector<float> got = read<float>(out[0]);
    for (int i = 0; i < 4; ++i) CHECK(got[i] == -2 * host[i] * host[i]);
  }
}

// A device-side check made inside per_variant (each variant computes its own code) is one check after it,
// its code bound to one name in both variants: both variants' programs return it, with the same value.
TEST(per_variant_keeps_the_checks_both_variants_make) {
  const ElementType f32 = ElementType::kF32, s64 = ElementType::kS64;
  const bool saved = Builder::two_variants;
  Builder::two_variants = true;
  Program p;
  Value x = p.arg(f32, {4});
  Value y = p.b.per_variant([&] {
    const bool first = hlo::lowering_variant() == 0;
    if (first) hlo::note_variant_choice();
    Value head = p.b.slice(x, {0}, {2}, {1});
    Value code = p.b.convert(first ? head : p.b.binary("add", head, p.b.constant(0, Type{f32, {2}})), s64);
    p.b.add_check({code, "index {value} is out of range", true});
    return std::vector<Value>{first ? p.b.unary("negate", x)
                                    : p.b.binary("subtract", p.b.constant(0, Type{f32, {4}}), x)};
  })[0];
  Builder::two_variants = saved;
  CHECK(p.b.checks().size() == 1 && p.b.checks()[0].message == "index {value} is out of range");
  p.b.ret({y, p.b.checks()[0].code});
  const float host[4] = {3, -2, 5, 0.5f};
  auto& c = test_client();
  for (int variant : {0, 1}) {
    auto exe = c.compile(p.b.module_text("m", variant), p.in, {{f32, {4}}, {s64, {2}}});
    auto in = c.from_host(host, f32, {4}, 0);
    auto out = exe->execute(0, {in.get()}, "test");
    std::vector<int64_t> code = read<int64_t>(out[1]);
    CHECK(code[0] == 3 && code[1] == -2);
    CHECK(read<float>(out[0])[2] == -5);
  }
}

// A lowering that fails for the targets leaves this device's program as it is, and says why.
TEST(per_variant_failing_for_the_targets_keeps_the_device_program) {
  const ElementType f32 = ElementType::kF32;
  const bool saved = Builder::two_variants;
  Builder::two_variants = true;
  Builder b;
  Value x = b.arg(Type{f32, {4}});
  Value y = b.per_variant([&] {
    if (hlo::lowering_variant() == 1) throw hlo::Error("no such op on the targets");
    hlo::note_variant_choice();
    return std::vector<Value>{b.unary("negate", x)};
  })[0];
  Builder::two_variants = saved;
  b.ret({y});
  CHECK(!b.has_variants());
  CHECK(b.variant_error() == "no such op on the targets");
  CHECK(b.module_text("m", 0) == b.module_text("m", 1));
  CHECK(b.module_text("m", 0).find("stablehlo.negate") != std::string::npos);
}
