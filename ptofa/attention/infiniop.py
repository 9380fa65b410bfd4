"""InfiniOp's FlashAttention operator interface, in Python, on ptofa's kernel.

The interface is that of InfiniCore's `include/infiniop/ops/flash_attention.h` (the Ascend
FlashAttention operator: `infiniopCreateFlashAttentionDescriptor(handle, &desc, out_desc,
q_desc, k_desc, v_desc, mask_desc)`, `infiniopGetFlashAttentionWorkspaceSize`,
`infiniopFlashAttention(desc, workspace, workspace_size, out, q, k, v, mask, stream)`,
`infiniopDestroyFlashAttentionDescriptor`) with its status codes (`infiniStatus_t` of
`include/infinicore.h`):

    status, desc = create_descriptor(TensorDescriptor.of(out), TensorDescriptor.of(q), ...)
    status, size = get_workspace_size(desc)
    workspace = torch.empty(size, dtype=torch.uint8)
    status = flash_attention(desc, workspace, size, out, q, k, v)
    status = destroy_descriptor(desc)

Every function returns a `Status` (out-values after it, as a tuple) and never raises for bad
input; `last_error()` gives the one-line reason of this thread's last failed call, `check`
turns a status into an `InfiniopError`. There is no handle: the backend ("auto": an NPU
where one is usable, else the simulator) is a keyword of `create_descriptor`.

Tensors, as InfiniOp lays them out: out, q [(batch,) seq_q, heads, head_dim], k, v
[(batch,) seq_kv, kv_heads, head_dim] (no batch dim = batch 1), contiguous, one dtype
(fp16; bf16 also runs), heads % kv_heads == 0, 1 <= head_dim <= 256 (a head dim that is no kernel width runs on
`kernel_head(head_dim)` with q/k/v zero-padded on the host, unsplit). The scale is
InfiniOp's 1 / sqrt(head_dim). The optional mask is InfiniOp's 2-D [seq_q, seq_kv] (bool,
uint8 or int8) with True / nonzero = the pair is masked OUT (the aclnn attenMask convention;
torch's SDPA uses the opposite). The kernel takes a bottom-right window and a key-padding
mask, so the mask must be such a band intersected with a set of padded keys (causal,
sliding window, padding, or none); any other pattern gives NOT_IMPLEMENTED.

Split-KV: `create_descriptor` makes the dense calls' split decision for its shape
(`splitkv.plan_dense_split`): with fewer work units than cube cores, and the timing
model predicting a split faster, the problem runs as a varlen batch of B equal sequences
whose KV ranges are split over several cores, the partial O and LSE combined by the reduce
kernel. The mask's contents are not known then, so a descriptor with a mask plans the split
count for every key visible (the most work a mask can leave); at call time a mask that is
a band alone runs that split count with the band's window, while a mask with padded keys
or a band the varlen kernel cannot say (a negative right bound: top-left causal with
seq_q < seq_kv) runs the unsplit dense kernel.

The workspace is what the kernels really use (`pipeline.workspace_bytes`): the GM slot rings
of every block and, split, the fp32 partial O [splits, B*seq_q, heads, head_dim] and LSE
[splits, heads, B*seq_q] after them. The slot rings per block are the same for every
switch; a split launch has at least as many blocks as the unsplit one, and a band at the
planned split count no more than the planned launch, so the size covers every call. A
smaller `workspace_size` gives INSUFFICIENT_WORKSPACE before anything runs; the buffer
given is the one the slot rings and partials live in (the simulator addresses it in place
and bounds-checks it, the NPU kernels get its address).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import threading
from dataclasses import dataclass

import torch

from ptofa.attention.core import auto_config, resolve_backend, run_attention, run_dense_split
from ptofa.kernels.builtin_mods.window import window_mods
from ptofa.launch.base import BackendUnavailable
from ptofa.launch.dispatch import backend_soc
from ptofa.launch.plan import blocks_for
from ptofa.launch.splitkv import DenseSplit, plan_dense_split
from ptofa.pipeline import MAX_HEAD, ConfigError, FAConfig, ProblemShape, kernel_head, workspace_bytes
from ptofa.sim.socspec import SocSpec


class Status(enum.IntEnum):
    """`infiniStatus_t` (InfiniCore include/infinicore.h), without the INFINI_STATUS_ prefix."""

    SUCCESS = 0
    INTERNAL_ERROR = 1
    NOT_IMPLEMENTED = 2
    BAD_PARAM = 3
    NULL_POINTER = 4
    DEVICE_TYPE_NOT_SUPPORTED = 5
    DEVICE_NOT_FOUND = 6
    DEVICE_NOT_INITIALIZED = 7
    DEVICE_ARCHITECTURE_NOT_SUPPORTED = 8
    BAD_TENSOR_DTYPE = 10
    BAD_TENSOR_SHAPE = 11
    BAD_TENSOR_STRIDES = 12
    INSUFFICIENT_WORKSPACE = 13


class DataType(enum.IntEnum):
    """`infiniDtype_t` (InfiniCore include/infinicore.h), without the INFINI_DTYPE_ prefix."""

    INVALID = 0
    BYTE = 1
    BOOL = 2
    I8 = 3
    I16 = 4
    I32 = 5
    I64 = 6
    U8 = 7
    U16 = 8
    U32 = 9
    U64 = 10
    F8 = 11
    F16 = 12
    F32 = 13
    F64 = 14
    C16 = 15
    C32 = 16
    C64 = 17
    C128 = 18
    BF16 = 19


_FROM_TORCH = {
    torch.bool: DataType.BOOL, torch.int8: DataType.I8, torch.int16: DataType.I16, torch.int32: DataType.I32,
    torch.int64: DataType.I64, torch.uint8: DataType.U8, torch.float16: DataType.F16, torch.float32: DataType.F32,
    torch.float64: DataType.F64, torch.bfloat16: DataType.BF16, torch.complex64: DataType.C64,
    torch.complex128: DataType.C128,
}
_TO_TORCH = {dt: t for t, dt in _FROM_TORCH.items()}
QKV_DTYPES = (DataType.F16, DataType.BF16)
MASK_DTYPES = (DataType.BOOL, DataType.U8, DataType.I8)


def data_type(dtype) -> DataType:
    """A `DataType` from a DataType / its int value or a torch dtype (INVALID for anything else)."""
    if isinstance(dtype, torch.dtype):
        return _FROM_TORCH.get(dtype, DataType.INVALID)
    try:
        return DataType(int(dtype))
    except (TypeError, ValueError):
        return DataType.INVALID


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class TensorDescriptor:
    """`infiniopTensorDescriptor_t`: element type, shape and strides (in elements)."""

    dtype: DataType
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def __init__(self, dtype, shape, strides=None) -> None:
        shape = tuple(int(n) for n in shape)
        strides = contiguous_strides(shape) if strides is None else tuple(int(s) for s in strides)
        object.__setattr__(self, "dtype", data_type(dtype))
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "TensorDescriptor":
        """The descriptor of a torch tensor (its dtype, shape and strides)."""
        return cls(tensor.dtype, tensor.shape, tensor.stride())

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        """Row-major dense (dims of size 1 may have any stride), as InfiniOp's isContiguous."""
        if len(self.strides) != len(self.shape):
            return False
        return all(n == 1 or s == c for n, s, c in zip(self.shape, self.strides, contiguous_strides(self.shape)))


class InfiniopError(RuntimeError):
    """A status other than SUCCESS, raised by `check`."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(f"{status.name} ({int(status)}): {message}")
        self.status = status


_LOCAL = threading.local()


def last_error() -> str:
    """The reason of this thread's last call that did not return SUCCESS ("" after a success)."""
    return getattr(_LOCAL, "message", "")


def check(status: Status) -> None:
    """Raise `InfiniopError` (with `last_error()`) unless `status` is SUCCESS."""
    if status != Status.SUCCESS:
        raise InfiniopError(Status(status), last_error())


class _Fail(Exception):
    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


def _returns_status(with_value: bool):
    """Turn `_Fail` into its status (and `last_error`), any other exception into INTERNAL_ERROR;
    `with_value`: the function returns (status, value), and (status, None) on failure."""

    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                result = fn(*args, **kwargs)
            except _Fail as failure:
                status, _LOCAL.message = failure.status, str(failure)
            except Exception as error:  # noqa: BLE001 (InfiniOp reports failures, it does not raise)
                first_line = str(error).splitlines()[0] if str(error) else ""
                status, _LOCAL.message = Status.INTERNAL_ERROR, f"{type(error).__name__}: {first_line}"
            else:
                _LOCAL.message = ""
                return result
            return (status, None) if with_value else status

        return call

    return wrap


@dataclass
class FlashAttentionDescriptor:
    """`infiniopFlashAttentionDescriptor_t`: the checked shapes, the kernel config and the workspace."""

    out: TensorDescriptor
    q: TensorDescriptor
    k: TensorDescriptor
    v: TensorDescriptor
    mask: TensorDescriptor | None
    shape: ProblemShape
    config: FAConfig  # tiles, head dim and dtype; the mask's switches are set per call
    backend: str  # "sim" or "npu"
    block_dim: int
    workspace_size: int  # bytes: workspace_bytes of the split launch, else of the dense one
    scale: float
    cores: int  # cube cores the launches are planned for
    split: DenseSplit | None  # the split planned for the mask-free problem, None: unsplit
    soc: SocSpec | None = None  # the chip the launches are planned for
    destroyed: bool = False


def _descriptor(desc) -> FlashAttentionDescriptor:
    if desc is None:
        raise _Fail(Status.NULL_POINTER, "desc: is None")
    if not isinstance(desc, FlashAttentionDescriptor):
        raise _Fail(Status.BAD_PARAM, f"desc: must be a FlashAttentionDescriptor, got {type(desc).__name__}")
    if desc.destroyed:
        raise _Fail(Status.BAD_PARAM, "desc: the descriptor was destroyed")
    return desc


@_returns_status(with_value=True)
def create_descriptor(out_desc: TensorDescriptor, q_desc: TensorDescriptor, k_desc: TensorDescriptor,
                      v_desc: TensorDescriptor, mask_desc: TensorDescriptor | None = None, *,
                      backend: str = "auto") -> tuple[Status, FlashAttentionDescriptor | None]:
    """infiniopCreateFlashAttentionDescriptor: check the tensor descriptors, pick the kernel config
    and (with fewer units than cube cores) the split-KV launch, as the module docstring says.

    Returns (status, descriptor or None). NULL_POINTER for a missing out/q/k/v descriptor;
    BAD_TENSOR_DTYPE unless out, q, k, v share fp16 or bf16 (and the mask is bool/u8/i8);
    BAD_TENSOR_SHAPE for ranks other than 3 / 4, mismatched batch, lengths, heads or head
    dims, heads % kv_heads != 0, an unsupported head dim, or a mask that is not
    [seq_q, seq_kv]; BAD_TENSOR_STRIDES for a non-contiguous descriptor; DEVICE_NOT_FOUND
    for backend="npu" without an NPU.
    """
    named = {"out_desc": out_desc, "q_desc": q_desc, "k_desc": k_desc, "v_desc": v_desc}
    for name, d in named.items():
        if d is None:
            raise _Fail(Status.NULL_POINTER, f"{name}: is None")
        if not isinstance(d, TensorDescriptor):
            raise _Fail(Status.BAD_PARAM, f"{name}: must be a TensorDescriptor, got {type(d).__name__}")
    if mask_desc is not None and not isinstance(mask_desc, TensorDescriptor):
        raise _Fail(Status.BAD_PARAM, f"mask_desc: must be a TensorDescriptor or None, got {type(mask_desc).__name__}")
    dtype = out_desc.dtype
    if any(d.dtype != dtype for d in named.values()):
        raise _Fail(Status.BAD_TENSOR_DTYPE, "dtype: out, q, k and v must share one dtype; got "
                    + ", ".join(d.dtype.name for d in named.values()))
    if dtype not in QKV_DTYPES:
        raise _Fail(Status.BAD_TENSOR_DTYPE, f"dtype: {dtype.name} is not supported (F16 or BF16)")
    ndim = out_desc.ndim
    if ndim not in (3, 4) or any(d.ndim != ndim for d in named.values()):
        raise _Fail(Status.BAD_TENSOR_SHAPE, "rank: out, q, k and v must all be [(batch,) seqlen, heads, head_dim]; "
                    "got " + ", ".join(str(d.shape) for d in named.values()))
    out4, q4, k4, v4 = (((1,) + d.shape) if ndim == 3 else d.shape for d in named.values())
    batch, s0, heads, head = q4
    s1, kv_heads = k4[1], k4[2]
    rules = [
        (out4 == q4, f"out {out_desc.shape} must have q's shape {q_desc.shape}"),
        (k4 == v4, f"k {k_desc.shape} and v {v_desc.shape} must have the same shape"),
        (k4[0] == batch, f"batch: q has {batch}, k/v have {k4[0]}"),
        (k4[3] == head, f"head_dim: q has {head}, k/v have {k4[3]}"),
        (min(batch, s0, heads, s1, kv_heads) >= 1, f"sizes must be >= 1; got q {q_desc.shape}, k {k_desc.shape}"),
        (kv_heads >= 1 and heads % kv_heads == 0, f"grouped heads: heads={heads} must be a multiple of kv_heads={kv_heads}"),
        (1 <= head <= MAX_HEAD, f"head_dim={head} must be in 1..{MAX_HEAD}"),
    ]
    for ok, message in rules:
        if not ok:
            raise _Fail(Status.BAD_TENSOR_SHAPE, f"shape: {message}")
    for name, d in named.items():
        if not d.is_contiguous():
            raise _Fail(Status.BAD_TENSOR_STRIDES, f"strides: {name} {d.strides} of shape {d.shape} is not contiguous")
    if mask_desc is not None:
        if mask_desc.dtype not in MASK_DTYPES:
            raise _Fail(Status.BAD_TENSOR_DTYPE, f"mask dtype: {mask_desc.dtype.name} must be BOOL, U8 or I8")
        if mask_desc.shape != (s0, s1):
            raise _Fail(Status.BAD_TENSOR_SHAPE, f"mask shape: {mask_desc.shape} must be [seq_q, seq_kv] = ({s0}, {s1})")
        if not mask_desc.is_contiguous():
            raise _Fail(Status.BAD_TENSOR_STRIDES, f"mask strides: {mask_desc.strides} is not contiguous")
    try:
        backend = resolve_backend(backend)
    except BackendUnavailable as missing:
        raise _Fail(Status.DEVICE_NOT_FOUND, str(missing)) from None
    except ValueError as bad:
        raise _Fail(Status.BAD_PARAM, str(bad)) from None
    in_dtype = "f16" if dtype == DataType.F16 else "bf16"
    shape = ProblemShape(batch, heads, s0, s1, kv_heads=kv_heads)
    soc = backend_soc(backend)
    try:
        width = kernel_head(head)
        auto_config(width, in_dtype, s1=s1)  # the fixed rule first: an unsupported head dim is a shape error
        config = auto_config(width, in_dtype, s1=s1, shape=shape, soc=soc)  # the timing model's choice here
    except ConfigError as error:
        raise _Fail(Status.BAD_TENSOR_SHAPE, str(error)) from None
    scale = 1.0 / math.sqrt(head)
    block_dim = blocks_for(shape.work_units(config), soc)
    # A padded head dim runs unsplit: the split path takes the caller's tensors as they are.
    split = None if width != head else plan_dense_split(config, batch, s0, s1, heads, kv_heads, None, soc, scale=scale)
    size = workspace_bytes(config, shape, block_dim) if split is None else split.workspace_bytes()
    desc = FlashAttentionDescriptor(out_desc, q_desc, k_desc, v_desc, mask_desc, shape, config, backend, block_dim,
                                    size, scale, soc.cube_cores, split, soc)
    return Status.SUCCESS, desc


@_returns_status(with_value=True)
def get_workspace_size(desc: FlashAttentionDescriptor) -> tuple[Status, int | None]:
    """infiniopGetFlashAttentionWorkspaceSize: (status, bytes) — the GM slot rings of every block,
    and the split-KV partials when the descriptor planned a split."""
    return Status.SUCCESS, _descriptor(desc).workspace_size


@_returns_status(with_value=False)
def destroy_descriptor(desc: FlashAttentionDescriptor) -> Status:
    """infiniopDestroyFlashAttentionDescriptor: the descriptor cannot be used afterwards."""
    _descriptor(desc).destroyed = True
    return Status.SUCCESS


def mask_to_window(mask: torch.Tensor) -> tuple[tuple[int, int] | None, torch.Tensor | None]:
    """An InfiniOp mask [S0, S1] (nonzero = masked out) as the kernel's arguments:
    ((win_left, win_right) bottom-right window bounds or None, key mask [S1] int8 or None).

    The visible pairs must be the same keys for every row (key padding), or a bottom-right
    band, or a band intersected with a set of keys that take part (tried in this order); the
    band is taken from the extreme visible keys of the rows and the result checked against
    the whole mask. ValueError when nothing matches.
    """
    visible = mask == 0
    s0, s1 = visible.shape
    if bool(visible.all()):
        return None, None
    keys = visible.any(0)
    rows = visible.any(1)
    if not bool(rows.any()):  # nothing visible at all: every key is padding
        return None, keys.to(torch.int8)
    j = torch.arange(s1, device=visible.device)
    diag = torch.arange(s0, device=visible.device).unsqueeze(1) + (s1 - s0)  # key aligned with each query row
    first = torch.where(visible, j, s1).min(1).values.unsqueeze(1)
    last = torch.where(visible, j, -1).max(1).values.unsqueeze(1)
    if torch.equal(visible, keys.expand_as(visible)):  # the same keys for every row: padding only
        return None, keys.to(torch.int8)
    left = int((diag - first)[rows].max())
    right = int((last - diag)[rows].max())
    band = (j >= diag - left) & (j <= diag + right)
    if torch.equal(band, visible):
        return (left, right), None
    if torch.equal(band & keys, visible):
        return (left, right), keys.to(torch.int8)
    raise ValueError("mask: only a bottom-right band (causal / sliding window) intersected with padded keys runs on "
                     "this kernel; this mask's visible pairs are not of that form")


def device_type_of(backend: str) -> str:
    """The torch device type of a backend's tensors: "cpu" for the simulator, "npu" for an NPU."""
    return "cpu" if backend == "sim" else "npu"


def _check_tensor(name: str, t, d: TensorDescriptor, device_type: str) -> None:
    if t is None:
        raise _Fail(Status.NULL_POINTER, f"{name}: is None")
    if not isinstance(t, torch.Tensor):
        raise _Fail(Status.BAD_PARAM, f"{name}: must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != device_type:
        raise _Fail(Status.DEVICE_TYPE_NOT_SUPPORTED,
                    f"{name}: is on {t.device}; this descriptor runs on {device_type} tensors")
    if data_type(t.dtype) != d.dtype:
        raise _Fail(Status.BAD_TENSOR_DTYPE, f"{name}: dtype {t.dtype} does not match the descriptor's {d.dtype.name}")
    if tuple(t.shape) != d.shape:
        raise _Fail(Status.BAD_TENSOR_SHAPE, f"{name}: shape {tuple(t.shape)} does not match the descriptor's {d.shape}")
    if not t.is_contiguous() or not TensorDescriptor.of(t).is_contiguous():
        raise _Fail(Status.BAD_TENSOR_STRIDES, f"{name}: strides {t.stride()} are not contiguous")


@_returns_status(with_value=False)
def flash_attention(desc: FlashAttentionDescriptor, workspace: torch.Tensor | None, workspace_size: int,
                    out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None = None, stream=None) -> Status:
    """infiniopFlashAttention: out = softmax(q k^T / sqrt(head_dim) + mask) v, written in place.

    INSUFFICIENT_WORKSPACE when workspace_size < get_workspace_size(desc) (checked before
    anything runs); NULL_POINTER for a missing tensor or workspace (or mask, when the
    descriptor has one); BAD_PARAM for a workspace buffer smaller than workspace_size, a
    mask without a mask descriptor or a destroyed descriptor; BAD_TENSOR_DTYPE /
    BAD_TENSOR_SHAPE / BAD_TENSOR_STRIDES when a tensor differs from its descriptor;
    DEVICE_TYPE_NOT_SUPPORTED for a tensor on another device than the backend's;
    NOT_IMPLEMENTED for a mask that is not a band with padded keys; INTERNAL_ERROR when
    the run fails. `stream` is the NPU stream (default: the current one); the simulator
    ignores it.
    """
    desc = _descriptor(desc)
    for name, t in (("out", out), ("q", q), ("k", k), ("v", v)):
        if t is None:
            raise _Fail(Status.NULL_POINTER, f"{name}: is None")
    if desc.mask is not None and mask is None:
        raise _Fail(Status.NULL_POINTER, "mask: is None but the descriptor was created with a mask")
    if desc.mask is None and mask is not None:
        raise _Fail(Status.BAD_PARAM, "mask: given, but the descriptor was created without a mask descriptor")
    if isinstance(workspace_size, bool) or not isinstance(workspace_size, int) or workspace_size < 0:
        raise _Fail(Status.BAD_PARAM, f"workspace_size: {workspace_size!r} must be an int >= 0")
    if workspace_size < desc.workspace_size:
        raise _Fail(Status.INSUFFICIENT_WORKSPACE,
                    f"workspace_size: {workspace_size} bytes < {desc.workspace_size} needed ({_workspace_parts(desc)})")
    if workspace is None:
        raise _Fail(Status.NULL_POINTER, f"workspace: is None but {desc.workspace_size} bytes are needed")
    device_type = device_type_of(desc.backend)
    if not isinstance(workspace, torch.Tensor):
        raise _Fail(Status.BAD_PARAM, f"workspace: must be a torch.Tensor, got {type(workspace).__name__}")
    if workspace.device.type != device_type:
        raise _Fail(Status.DEVICE_TYPE_NOT_SUPPORTED, f"workspace: is on {workspace.device}; "
                    f"this descriptor runs on {device_type} tensors")
    if not workspace.is_contiguous():
        raise _Fail(Status.BAD_TENSOR_STRIDES, f"workspace: strides {workspace.stride()} are not contiguous")
    buffer_bytes = workspace.numel() * workspace.element_size()
    if buffer_bytes < workspace_size:
        raise _Fail(Status.BAD_PARAM, f"workspace: the buffer has {buffer_bytes} bytes, workspace_size says {workspace_size}")
    for name, t, d in (("out", out, desc.out), ("q", q, desc.q), ("k", k, desc.k), ("v", v, desc.v)):
        _check_tensor(name, t, d, device_type)
    bounds, key_mask = None, None
    if mask is not None:
        _check_tensor("mask", mask, desc.mask, device_type)
        try:
            bounds, key_mask = mask_to_window(mask)
        except ValueError as unsupported:
            raise _Fail(Status.NOT_IMPLEMENTED, str(unsupported)) from None
    four = (lambda t: t.unsqueeze(0)) if desc.out.ndim == 3 else (lambda t: t)
    buffer = workspace.reshape(-1).view(torch.uint8)
    split = _call_split(desc, bounds, key_mask)
    if split is not None:
        run_dense_split(split, four(q), four(k), four(v), return_lse=False, backend=desc.backend,
                        out=four(out), workspace=buffer[:desc.workspace_size], stream=stream)
        return Status.SUCCESS
    config = dataclasses.replace(desc.config, mods=window_mods(bounds is not None),
                                 key_padding=key_mask is not None)
    slots = buffer[:workspace_bytes(config, desc.shape, desc.block_dim)]
    run_attention(four(q), four(k), four(v), scale=desc.scale, bounds=bounds, key_padding_mask=key_mask,
                  backend=desc.backend, config=config, block_dim=desc.block_dim, out=four(out), workspace=slots,
                  stream=stream)
    return Status.SUCCESS


def _call_split(desc: FlashAttentionDescriptor, bounds: tuple[int, int] | None,
                key_mask: torch.Tensor | None) -> DenseSplit | None:
    """The split this call runs: the descriptor's, with the mask's window at its split counts (as
    many entries and at most as many splits, so the same workspace fits); None (the unsplit dense
    kernel) without a planned split, with padded keys, or for a window the varlen kernel cannot say."""
    if desc.split is None or key_mask is not None:
        return None
    if bounds is None:
        return desc.split
    shape = desc.shape
    return plan_dense_split(desc.config, shape.batch, shape.s0, shape.s1, shape.heads, shape.kv_heads, bounds,
                            desc.soc, scale=desc.scale, num_splits=desc.split.launch_splits)


def _workspace_parts(desc: FlashAttentionDescriptor) -> str:
    """What the descriptor's workspace holds, for INSUFFICIENT_WORKSPACE."""
    if desc.split is None:
        return f"{desc.config.gm_slot_bytes_per_block} bytes of slot rings x {desc.block_dim} blocks"
    plan = desc.split.plan
    slots = plan.config.gm_slot_bytes_per_block * plan.block_dim
    return (f"{plan.config.gm_slot_bytes_per_block} bytes of slot rings x {plan.block_dim} blocks + "
            f"{desc.workspace_size - slots} bytes of partial O and LSE for num_splits={plan.num_splits}")


__all__ = [
    "DataType",
    "FlashAttentionDescriptor",
    "InfiniopError",
    "Status",
    "TensorDescriptor",
    "check",
    "create_descriptor",
    "destroy_descriptor",
    "flash_attention",
    "get_workspace_size",
    "last_error",
    "mask_to_window",
]
