"""Every op the simulator runs has a test of its semantics against numpy.

`test_op_registry.py` checks that every op has semantics and a cost; it cannot see
whether the semantics are right (a `pto.trelu` that copied its input would pass it).
Here every op with simulator semantics (`registry.SEMANTICS`) must be in exactly one of:

* `NUMPY`: op -> (form, numpy function); `test_op_against_numpy` runs the op in a
  one-op kernel on random tiles and compares with the function. The forms are the
  common operand shapes (`FORMS`); a new elementwise op needs one line here.
* `TESTED_IN`: op -> the test file that checks it against numpy or torch with a form
  of its own (a matmul, a gather, the pipes); the file must name the op.
* `NOT_NUMERIC`: op -> why it has no numpy counterpart (pipe and sync protocol, runtime
  ids, views, an op the simulator refuses with a `SimError`).

`test_every_simulated_op_has_a_numpy_test` fails for an op in none of them, naming this
file (docs/adding-an-op.md, step 4).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_sim_ops import consts, kernel, part, run, view2d

import ptofa.sim.executor  # noqa: F401  (registers the simulator semantics)
from ptofa.ir import dialect as d
from ptofa.ir.dialect import comm
from ptofa.sim import registry

TESTS = Path(__file__).parent
N = 16
T = {"f32": f"!pto.tile_buf<vec, {N}x{N}xf32>", "i32": f"!pto.tile_buf<vec, {N}x{N}xi32>"}
COL = f"!pto.tile_buf<vec, {N}x1xf32, blayout=col_major>"
ROW = f"!pto.tile_buf<vec, 1x{N}xf32>"
SCALAR = {"f32": ("1.5", 1.5), "i32": ("3", 3)}

# form -> (input dtype, the op's line with %a %b %s %c %r %t %o, output tile, output shape).
FORMS = {
    "binary": ("f32", "pto.{op} ins(%a, %b : {T}, {T}) outs(%o : {T})", "T", (N, N)),
    "unary": ("f32", "pto.{op} ins(%a : {T}) outs(%o : {T})", "T", (N, N)),
    "scalar": ("f32", "pto.{op} ins(%a, %s : {T}, f32) outs(%o : {T})", "T", (N, N)),
    "scalar_tmp": ("f32", "pto.{op} ins(%a, %s, %t : {T}, f32, {T}) outs(%o : {T})", "T", (N, N)),
    "binary_tmp": ("f32", "pto.{op} ins(%a, %b, %t : {T}, {T}, {T}) outs(%o : {T})", "T", (N, N)),
    "row_reduce": ("f32", "pto.{op} ins(%a : {T}) outs(%o : {COL})", "COL", (N, 1)),
    "row_expand": ("f32", "pto.{op} ins(%a, %c : {T}, {COL}) outs(%o : {T})", "T", (N, N)),
    "row_expand_tmp": ("f32", "pto.{op} ins(%a, %c, %t : {T}, {COL}, {T}) outs(%o : {T})", "T", (N, N)),
    "col_expand": ("f32", "pto.{op} ins(%a, %r : {T}, {ROW}) outs(%o : {T})", "T", (N, N)),
    "int_binary": ("i32", "pto.{op} ins(%a, %b : {T}, {T}) outs(%o : {T})", "T", (N, N)),
    "int_binary_tmp": ("i32", "pto.{op} ins(%a, %b, %t : {T}, {T}, {T}) outs(%o : {T})", "T", (N, N)),
    "int_scalar": ("i32", "pto.{op} ins(%a, %s : {T}, i32) outs(%o : {T})", "T", (N, N)),
    "int_scalar_tmp": ("i32", "pto.{op} ins(%a, %s, %t : {T}, i32, {T}) outs(%o : {T})", "T", (N, N)),
}

# a: [N, N], b: [N, N] (positive for the float forms), s: the scalar, c: [N, 1], r: [1, N].
NUMPY = {
    d.TAddOp: ("binary", lambda a, b, **_: a + b),
    d.TSubOp: ("binary", lambda a, b, **_: a - b),
    d.TMulOp: ("binary", lambda a, b, **_: a * b),
    d.TDivOp: ("binary", lambda a, b, **_: a / b),
    d.TMaxOp: ("binary", lambda a, b, **_: np.maximum(a, b)),
    d.TMinOp: ("binary", lambda a, b, **_: np.minimum(a, b)),
    d.TExpOp: ("unary", lambda a, **_: np.exp(a)),
    d.TLogOp: ("unary", lambda a, **_: np.log(np.abs(a))),  # run on |a| (see _inputs)
    d.TSqrtOp: ("unary", lambda a, **_: np.sqrt(np.abs(a))),
    d.TRsqrtOp: ("unary", lambda a, **_: 1 / np.sqrt(np.abs(a))),
    d.TRecipOp: ("unary", lambda a, **_: 1 / a),
    d.TAbsOp: ("unary", lambda a, **_: np.abs(a)),
    d.TNegOp: ("unary", lambda a, **_: -a),
    d.TReluOp: ("unary", lambda a, **_: np.where(a > 0, a, 0)),
    d.TAddsOp: ("scalar", lambda a, s, **_: a + s),
    d.TSubsOp: ("scalar", lambda a, s, **_: a - s),
    d.TMulsOp: ("scalar", lambda a, s, **_: a * s),
    d.TDivsOp: ("scalar", lambda a, s, **_: a / s),
    d.TMaxsOp: ("scalar", lambda a, s, **_: np.maximum(a, s)),
    d.TMinsOp: ("scalar", lambda a, s, **_: np.minimum(a, s)),
    d.TRowMaxOp: ("row_reduce", lambda a, **_: a.max(axis=1, keepdims=True)),
    d.TRowSumOp: ("row_reduce", lambda a, **_: a.sum(axis=1, keepdims=True)),
    d.TRowMinOp: ("row_reduce", lambda a, **_: a.min(axis=1, keepdims=True)),
    d.TRowExpandAddOp: ("row_expand", lambda a, c, **_: a + c),
    d.TRowExpandSubOp: ("row_expand", lambda a, c, **_: a - c),
    d.TRowExpandMulOp: ("row_expand", lambda a, c, **_: a * c),
    d.TRowExpandDivOp: ("row_expand", lambda a, c, **_: a / c),
    d.TRowExpandMaxOp: ("row_expand", lambda a, c, **_: np.maximum(a, c)),
    d.TRowExpandMinOp: ("row_expand", lambda a, c, **_: np.minimum(a, c)),
    d.TRowExpandExpdifOp: ("row_expand_tmp", lambda a, c, **_: np.exp(a - c)),
    d.TColExpandAddOp: ("col_expand", lambda a, r, **_: a + r),
    d.TColExpandSubOp: ("col_expand", lambda a, r, **_: a - r),
    d.TColExpandMulOp: ("col_expand", lambda a, r, **_: a * r),
    d.TColExpandDivOp: ("col_expand", lambda a, r, **_: a / r),
    d.TColExpandMaxOp: ("col_expand", lambda a, r, **_: np.maximum(a, r)),
    d.TColExpandMinOp: ("col_expand", lambda a, r, **_: np.minimum(a, r)),
    d.TPowOp: ("binary_tmp", lambda a, b, **_: np.abs(a) ** b),  # run on |a| (see _inputs)
    d.TRemOp: ("binary_tmp", lambda a, b, **_: a - np.floor(a / b) * b),
    d.TFModOp: ("binary", lambda a, b, **_: np.fmod(a, b)),
    d.TRemsOp: ("scalar_tmp", lambda a, s, **_: a - np.floor(a / s) * s),
    d.TFModsOp: ("scalar", lambda a, s, **_: np.fmod(a, s)),
    d.TAndOp: ("int_binary", lambda a, b, **_: a & b),
    d.TOrOp: ("int_binary", lambda a, b, **_: a | b),
    d.TXorOp: ("int_binary_tmp", lambda a, b, **_: a ^ b),
    d.TShlOp: ("int_binary", lambda a, b, **_: a << b),
    d.TShrOp: ("int_binary", lambda a, b, **_: a >> b),
    d.TAndsOp: ("int_scalar", lambda a, s, **_: a & s),
    d.TOrsOp: ("int_scalar", lambda a, s, **_: a | s),
    d.TXorsOp: ("int_scalar_tmp", lambda a, s, **_: a ^ s),
    d.TShlsOp: ("int_scalar", lambda a, s, **_: a << s),
    d.TShrsOp: ("int_scalar", lambda a, s, **_: a >> s),
    d.TPowsOp: ("int_scalar", lambda a, s, **_: a ** s),
    d.TNotOp: ("int_unary", lambda a, **_: ~a),
}
FORMS["int_unary"] = ("i32", "pto.{op} ins(%a : {T}) outs(%o : {T})", "T", (N, N))
_ABS_INPUT = {d.TLogOp, d.TSqrtOp, d.TRsqrtOp, d.TPowOp}


def _inputs(op: type, dtype: str, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "i32":
        a = rng.integers(-1000, 1000, (N, N), dtype=np.int32)
        b = rng.integers(0, 8, (N, N), dtype=np.int32)  # also a shift count
        if op is d.TPowsOp:
            a = rng.integers(-20, 20, (N, N), dtype=np.int32)
        return {"a": a, "b": b}
    a = rng.uniform(-3.0, 3.0, (N, N)).astype(np.float32)
    if op in _ABS_INPUT:
        a = np.abs(a) + np.float32(0.25)
    b = rng.uniform(0.5, 2.0, (N, N)).astype(np.float32)
    c = rng.uniform(0.5, 2.0, (N, 1)).astype(np.float32)
    r = rng.uniform(0.5, 2.0, (1, N)).astype(np.float32)
    return {"a": a, "b": b, "c": c, "r": r}


def _load(name: str, rows: int, cols: int, elem: str, tile: str) -> str:
    return (view2d(f"{name}v", f"g{name}", rows, cols, elem) + "\n"
            + part(f"{name}p", f"{name}v", rows, cols, rows, cols, elem) + "\n"
            + f"%{name} = pto.alloc_tile : {tile}\n"
            + f"pto.tload ins(%{name}p : !pto.partition_tensor_view<{rows}x{cols}x{elem}>) outs(%{name} : {tile})")


def _program(op: type, form: str) -> tuple[str, list[str]]:
    """The one-op kernel of `op` in `form`, and the GM inputs it loads."""
    dtype, line, out, (out_rows, out_cols) = FORMS[form]
    tile = T[dtype]
    shapes = {"a": (N, N, tile), "b": (N, N, tile), "c": (N, 1, COL), "r": (1, N, ROW)}
    used = [name for name in "abcr" if f"%{name}" in line]
    body = [consts(0, 1, N, out_rows, out_cols)]
    body += [_load(name, *shapes[name][:2], dtype, shapes[name][2]) for name in used]
    out_tile = {"T": tile, "COL": COL}[out]
    body.append(f"%t = pto.alloc_tile : {tile}\n%o = pto.alloc_tile : {out_tile}")
    if "%s" in line:
        body.append(f"%s = arith.constant {SCALAR[dtype][0]} : {dtype}")
    body.append(line.format(op=op.name.removeprefix("pto."), T=tile, COL=COL, ROW=ROW))
    body.append(view2d("ov", "gout", out_rows, out_cols, dtype) + "\n"
                + part("op", "ov", out_rows, out_cols, out_rows, out_cols, dtype) + "\n"
                + f"pto.tstore ins(%o : {out_tile}) "
                + f"outs(%op : !pto.partition_tensor_view<{out_rows}x{out_cols}x{dtype}>)")
    params = [(f"g{name}", f"!pto.ptr<{dtype}>") for name in used] + [("gout", f"!pto.ptr<{dtype}>")]
    return kernel("\n".join(body), params), used


@pytest.mark.parametrize("op", list(NUMPY), ids=[op.name for op in NUMPY])
def test_op_against_numpy(op: type) -> None:
    form, ref = NUMPY[op]
    dtype, _, _, out_shape = FORMS[form]
    text, used = _program(op, form)
    for seed in (0,):
        x = _inputs(op, dtype, seed)
        out = np.zeros(out_shape, np.int32 if dtype == "i32" else np.float32)
        run(text, **{f"g{name}": x[name] for name in used}, gout=out)
        want = ref(**{k: v.astype(np.float64) if dtype == "f32" else v for k, v in x.items()}, s=SCALAR[dtype][1])
        if dtype == "i32":
            np.testing.assert_array_equal(out, np.asarray(want).astype(np.int32), err_msg=op.name)
        else:
            np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-6, err_msg=op.name)


# Ops checked against numpy / torch by a test of their own (file: it names the op).
TESTED_IN = {
    d.TAddReluOp: "test_ptoas_agreement.py",
    d.TGatherBOp: "test_ptoas_agreement.py",
    d.TMatmulOp: "test_sim.py",
    d.TCvtOp: "test_sim.py",
    d.TStoreOp: "test_sim.py",
    d.TMatmulAccOp: "test_sim_ops.py",
    d.TFillPadOp: "test_sim_ops.py",
    d.TCmpOp: "test_sim_ops.py",
    d.TSelOp: "test_sim_ops.py",
    d.TTriOp: "test_sim_ops.py",
    d.TLoadOp: "test_sim_access.py",
    d.TMovOp: "test_sim_access.py",
    d.TExpandsOp: "test_sim_access.py",
    d.TExtractOp: "test_sim_access.py",
    d.TInsertOp: "test_sim_access.py",
    d.TGetValOp: "test_sim_access.py",
    d.TSetValOp: "test_sim_access.py",
    d.TTransOp: "test_sim_access.py",
    d.TGatherOp: "test_sim_access.py",
    d.TColExpandOp: "test_sim_access.py",
    d.TCIOp: "test_sim_access.py",
    d.TColMaxOp: "test_sim_extra.py",
    d.TColMinOp: "test_sim_extra.py",
    d.TColProdOp: "test_sim_extra.py",
    d.TColSumOp: "test_sim_extra.py",
    d.TColArgMaxOp: "test_sim_extra.py",
    d.TColArgMinOp: "test_sim_extra.py",
    d.TRowArgMaxOp: "test_sim_extra.py",
    d.TRowArgMinOp: "test_sim_extra.py",
    d.TRowProdOp: "test_sim_extra.py",
    d.TColExpandExpdifOp: "test_sim_extra.py",
    d.TAddCOp: "test_sim_extra.py",
    d.TSubCOp: "test_sim_extra.py",
    d.TAxpyOp: "test_sim_extra.py",
    d.TLReluOp: "test_sim_extra.py",
    d.TDequantOp: "test_sim_extra.py",
    d.TPartAddOp: "test_sim_extra.py",
    d.TPartMaxOp: "test_sim_extra.py",
    d.TPartMinOp: "test_sim_extra.py",
    d.TPartMulOp: "test_sim_extra.py",
    d.TSelSOp: "test_sim_extra.py",
    d.TCmpSOp: "test_sim_extra.py",
    d.TScatterOp: "test_sim_extra.py",
    d.TPReluOp: "test_sim_fused.py",
    d.TRowExpandOp: "test_sim_fused.py",
    d.TAddSCOp: "test_sim_fused.py",
    d.TSubSCOp: "test_sim_fused.py",
    d.TMatmulBiasOp: "test_sim_fused.py",
    d.TConcatOp: "test_sim_fused.py",
    d.TConcatIdxOp: "test_sim_fused.py",
    d.MGatherOp: "test_sim_gather.py",
    d.MScatterOp: "test_sim_gather.py",
}

# Ops without a numpy counterpart, and why.
_RUNTIME = ("runtime ids, pointers, sections and GM scalars: no tile arithmetic (every kernel run against torch "
            "uses them)")
_PIPES = ("pipe protocol: moves tiles between cores unchanged (the pipe tests check the protocol, the kernels "
          "against torch the data)")
_SYNC = "synchronisation and cache ordering: orders work, computes nothing"
_STORAGE = "storage, views, queries and addresses: no arithmetic on tile values"
_REFUSED = "not simulated: the simulator raises a SimError naming the op (tests/test_sim_extra.py, test_sim_fused.py)"
NOT_NUMERIC = {
    **dict.fromkeys([d.TSyncOp, d.MakePrefetchAsyncContextOp, d.GetPrefetchAsyncSessionOp, d.TPrefetchAsyncOp], _SYNC),
    **dict.fromkeys([d.SetQuantScalarOp, d.SetQuantVectorOp], "fixpipe quantization payloads: the simulator refuses "
                    "the quantizing push (tests/test_ptoas_agreement.py)"),
    **dict.fromkeys([d.AddPtrOp, d.GetBlockIdxOp, d.GetBlockNumOp, d.GetSubblockIdxOp, d.GetSubblockNumOp,
                     d.SetFftsOp, d.SectionCubeOp, d.SectionVectorOp, d.LoadScalarOp, d.StoreScalarOp], _RUNTIME),
    **dict.fromkeys([d.AicInitializePipeOp, d.AivInitializePipeOp, d.TallocToAicOp, d.TallocToAivOp,
                     d.TpushToAicOp, d.TpushToAivOp, d.TpopFromAicOp, d.TpopFromAivOp, d.TfreeFromAicOp,
                     d.TfreeFromAivOp, d.TAllocOp, d.TPushOp, d.TPopOp, d.TFreeOp, d.DeclareGlobalOp,
                     d.DeclareTileOp, d.InitializeL2G2LPipeOp, d.InitializeL2LPipeOp], _PIPES),
    **dict.fromkeys([d.SetFlagOp, d.WaitFlagOp, d.SetFlagDynOp, d.WaitFlagDynOp, d.RecordEventOp,
                     d.WaitEventOp, d.SyncAllOp, d.BarrierOp, d.SetIntraBlockOp, d.WaitIntraBlockOp,
                     d.DeclareEventIdArrayOp, d.EventIdArrayGetOp, d.EventIdArraySetOp, d.FenceBarrierAllOp,
                     d.CmoCacheInvalidOp], _SYNC),
    **dict.fromkeys([d.AllocTileOp, d.AllocMultiTileOp, d.MultiTileGetOp, d.MakeTensorViewOp,
                     d.PartitionViewOp, d.SubviewOp, d.TReshapeOp, d.SetValidShapeOp, d.GetValidShapeOp,
                     d.GetTensorViewDimOp, d.GetTensorViewStrideOp, d.DeclareStructOp, d.StructGetOp,
                     d.StructSetOp, d.DeclareLocalArrayOp, d.LocalArrayGetOp, d.LocalArraySetOp,
                     d.ReserveBufferOp, d.ImportReservedBufferOp, d.CastPtrOp, d.IntToPtrOp, d.PtrToIntOp,
                     d.TPrefetchOp, d.TPrintOp], _STORAGE),
    **dict.fromkeys([d.TQuantOp, d.TSort32Op, d.TMrgSortOp, d.TPartArgMaxOp, d.TPartArgMinOp, comm.CommTPutOp,
                     comm.CommBuildAsyncSessionOp, comm.CommTBroadcastOp, comm.CommTestAsyncEventOp,
                     comm.CommTGatherOp, comm.CommTGetOp, comm.CommTGetAsyncOp, comm.CommTNotifyOp,
                     comm.CommTPutAsyncOp, comm.CommTReduceOp, comm.CommTScatterOp, comm.CommTTestOp,
                     comm.CommTWaitOp, comm.CommWaitAsyncEventOp], _REFUSED),
}


def test_every_simulated_op_has_a_numpy_test() -> None:
    missing, doubled = [], []
    for op in sorted(registry.SEMANTICS, key=lambda cls: cls.name):
        homes = [table for table in (NUMPY, TESTED_IN, NOT_NUMERIC) if op in table]
        if not homes:
            missing.append(op.name)
        elif len(homes) > 1:
            doubled.append(op.name)
    assert not missing, (
        f"no test of the simulator semantics against numpy for {missing}: add the op to NUMPY in "
        "tests/test_op_semantics.py (its form and numpy function), or to TESTED_IN with the test file that checks it "
        "(docs/adding-an-op.md, step 4)")
    assert not doubled, f"in more than one of NUMPY, TESTED_IN, NOT_NUMERIC: {doubled}"


@pytest.mark.parametrize("op", list(TESTED_IN), ids=[op.name for op in TESTED_IN])
def test_tested_in_names_the_op(op: type) -> None:
    text = (TESTS / TESTED_IN[op]).read_text()
    short = op.name.removeprefix("pto.")
    assert short in text, f"{TESTED_IN[op]} does not name {op.name}"
