"""What XLA's bounded dynamic shapes give through the plugin (docs/bounded-shapes.md): a program whose input
is padded to a bound and whose real size is a run-time scalar (stablehlo.set_dimension_size) reduces,
contracts and normalizes over the real elements only, and serves every size up to the bound. These are the
facts bucketed shapes (#33) build on; each is checked against torch on the CPU, for two sizes run by one
program."""
import pytest
import torch

import torch_pjrt
from torch_pjrt import _C

BOUND = 8
B = f"#stablehlo.bounds<{BOUND}>"
DYN = f"tensor<?xf32, {B}>"


def function(result_type, body):
    """func @f(x: f32[BOUND], n: i32) with x's first n elements as a bounded value %d."""
    return (
        f"func.func private @f(%x: tensor<{BOUND}xf32>, %n: tensor<i32>) -> {result_type} {{\n"
        f"  %d = stablehlo.set_dimension_size %x, %n, dim = 0 : (tensor<{BOUND}xf32>, tensor<i32>) -> {DYN}\n"
        f"{body}\n}}\n"
    )


def back_to_bound(value, out):
    """%value (bounded) as a static f32[BOUND] %out: its first n elements are the result."""
    return (f"  %bound = stablehlo.constant dense<{BOUND}> : tensor<i32>\n"
            f"  %{out} = stablehlo.set_dimension_size %{value}, %bound, dim = 0 : ({DYN}, tensor<i32>) -> "
            f"tensor<{BOUND}xf32>")


REDUCE = "  %z = stablehlo.constant dense<{init}> : tensor<f32>\n" \
         "  %r = stablehlo.reduce(%{v} init: %z) applies stablehlo.{op} across dimensions = [0] : " \
         f"({DYN}, tensor<f32>) -> tensor<f32>"

PROBES = {
    "sum": (function("tensor<f32>", REDUCE.format(init="0.0", v="d", op="add") + "\n  return %r : tensor<f32>"),
            [], lambda x: x.sum()),
    "max": (function("tensor<f32>", REDUCE.format(init="0xFF800000", v="d", op="maximum")
                     + "\n  return %r : tensor<f32>"),
            [], lambda x: x.max()),
    "dot": (function("tensor<f32>", f"  %r = stablehlo.dot_general %d, %d, contracting_dims = [0] x [0] : "
                                    f"({DYN}, {DYN}) -> tensor<f32>\n  return %r : tensor<f32>"),
            [], lambda x: x @ x),
    "softmax": (function(f"tensor<{BOUND}xf32>",
                         f"  %e = stablehlo.exponential %d : {DYN}\n" + REDUCE.format(init="0.0", v="e", op="add")
                         + f"\n  %b = stablehlo.broadcast_in_dim %r, dims = [] : (tensor<f32>) -> {DYN}\n"
                         f"  %q = stablehlo.divide %e, %b : {DYN}\n" + back_to_bound("q", "out")
                         + f"\n  return %out : tensor<{BOUND}xf32>"),
                [BOUND], lambda x: torch.softmax(x, 0)),
}


@pytest.mark.parametrize("name", sorted(PROBES))
def test_bounded_dimension_is_masked_by_xla(name):
    text, out_shape, reference = PROBES[name]
    g = _C._GraphBuilder(f"bounded_{name}")
    ids = [g.input(torch.float32, [BOUND]), g.input(torch.int32, [])]
    program = g.compile(g.call(text, "f", ids, [(torch.float32, out_shape)]))
    x = torch.randn(BOUND, generator=torch.Generator().manual_seed(0))
    before = torch_pjrt.metrics()["compiles"]
    for n in (5, 3, BOUND):
        (out,) = program.run([x.to("tpu"), torch.tensor(n, dtype=torch.int32).to("tpu")])
        expected = reference(x[:n])
        got = out.cpu()[:n] if out_shape else out.cpu()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert torch_pjrt.metrics()["compiles"] == before  # one program for every size up to the bound
