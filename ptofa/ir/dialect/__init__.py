"""The PTO dialect on xDSL: the subset of ptoas 0.60's PTO IR the FA kernel uses.

Types, attributes and ops are written in ptoas's *custom* assembly syntax
(docs/sources.md §3), so that a module printed here is what ptoas reads,
and a `.pto` written by ptoas's own tests parses here. Every op verifies the
rules of docs/sources.md §2-3 it can check locally (memory spaces, dtypes, shapes,
alignment); rules spanning a function (pipe init / use pairing) live in
`verify_pipes`, called from `ptofa.ir.textio.verify_module`.

One module per family: `types` (types, enum attributes, dims helpers), `base`
(shared custom-syntax helpers), `runtime` (block ids, set_ffts), `memory`
(pointers, GM views, tile allocation and data movement, set_validshape), `vector`
(elementwise binary / unary / scalar ops, texpands, tcvt), `rowcol` (row reductions,
row and column broadcasts), `masks` (ttri, tcmp / tcmps, tsel, tci, tfillpad; the hidden UB scratch ptoas gives ops
written without a tmp),
`views`
(treshape, subview), `tileaccess` (textract, tinsert, tsetval / tgetval, ttrans, tgather,
tcolexpand, tprint), `buffers` (core sections, reserved buffers, castptr, barrier), `cube`
and `pipes`; from the A2/A3 front end beyond FlashAttention: `multitile` (multi-buffer
tiles), `reductions` (column / arg reductions, tlrelu, taxpy, taddc), `gathers` (mgather,
mscatter), `fused` (tprelu, trowexpand, taddsc, tconcat, tmatmul.bias, address casts),
`comm` (pto.comm.*, cache invalidation, fences), `sorts`, `quant`, `localarray`, `sync`
(hand-written flags, intra-block flags, syncall, event-id arrays), `ipipes` (ptoas's
internal `!pto.pipe` handle form), `partial` (tpart*, tsels), `gmquery`
(get_tensor_view_dim / _stride, get_validshape, tprefetch), `structs` (stack-local structs)
and `scatter` (tscatter). This package re-exports all of them, assembles the `PTO`
dialect and makes the xDSL context that parses it (`make_context`); `docs/adding-an-op.md` walks through adding an op.
"""

from xdsl.context import Context
from xdsl.dialects import arith, builtin, cf, func, scf
from xdsl.ir import Dialect

from ptofa.ir.dialect import buffers, cube, intops, masks, memory, pipes, rowcol, runtime, tileaccess, types, vector, views
from ptofa.ir.dialect.base import (BuildRuleError, _BinaryOp, _ColExpandOp, _InsOutsOp, _RowExpandOp, _RowReduceOp, _ScalarOp, _UnaryOp,
                                   constant_index, physical_shape, tile_layout)
from ptofa.ir.dialect.buffers import SECTION_OPS, BarrierOp, CastPtrOp, ImportReservedBufferOp, ReserveBufferOp, SectionCubeOp, SectionVectorOp
from ptofa.ir.dialect.cube import CUBE_ONLY_OPS, TMatmulAccOp, TMatmulOp
from ptofa.ir.dialect.intops import (
    TAndOp,
    TAndsOp,
    TFModOp,
    TFModsOp,
    TNotOp,
    TOrOp,
    TOrsOp,
    TPowOp,
    TPowsOp,
    TRemOp,
    TRemsOp,
    TShlOp,
    TShlsOp,
    TShrOp,
    TShrsOp,
    TXorOp,
    TXorsOp,
)
from ptofa.ir.dialect.masks import HIDDEN_TCI_TMP, HIDDEN_TSEL_TMP, TCIOp, hidden_scratch, TCmpOp, TCmpSOp, TFillPadOp, TSelOp, TTriOp, _CmpOp
from ptofa.ir.dialect.memory import (
    ALLOC_OPS,
    AddPtrOp,
    AllocTileOp,
    LoadScalarOp,
    MakeTensorViewOp,
    PartitionViewOp,
    SetValidShapeOp,
    StoreScalarOp,
    TLoadOp,
    TMovOp,
    TStoreOp,
    view_layout,
)
from ptofa.ir.dialect.pipes import (
    PIPE_DATA_OPS,
    PIPE_INIT_OPS,
    AicInitializePipeOp,
    AivInitializePipeOp,
    TallocToAicOp,
    TallocToAivOp,
    TfreeFromAicOp,
    TfreeFromAivOp,
    TpopFromAicOp,
    TpopFromAivOp,
    TpushToAicOp,
    TpushToAivOp,
    _InitPipeOp,
    _PipeDataOp,
    _ProducesEntry,
    _TakesEntry,
)
from ptofa.ir.dialect.rowcol import (
    TColExpandAddOp,
    TColExpandDivOp,
    TColExpandMaxOp,
    TColExpandMinOp,
    TColExpandMulOp,
    TColExpandSubOp,
    TRowExpandAddOp,
    TRowExpandDivOp,
    TRowExpandExpdifOp,
    TRowExpandMaxOp,
    TRowExpandMinOp,
    TRowExpandMulOp,
    TRowExpandSubOp,
    TRowMaxOp,
    TRowMinOp,
    TRowSumOp,
)
from ptofa.ir.dialect.views import SubviewOp, TReshapeOp
from ptofa.ir.dialect.runtime import GetBlockIdxOp, GetBlockNumOp, GetSubblockIdxOp, GetSubblockNumOp, SetFftsOp, _RuntimeIdOp
from ptofa.ir.dialect.tileaccess import TColExpandOp, TExtractOp, TGatherBOp, TGatherOp, TGetValOp, TInsertOp, TPrintOp, TSetValOp, TTransOp
from ptofa.ir.dialect.types import (
    AddressSpaceAttr,
    MaskPatternAttr,
    ReluPreModeAttr,
    BLAYOUTS,
    DYN,
    FRACTALS,
    MEMORY_SPACES,
    PAD_NAMES,
    ROUND_MODES,
    SLAYOUTS,
    TILE_LOCS,
    AccPhaseAttr,
    AccPushEpilogueAttr,
    AccToVecModeAttr,
    AtomicTypeAttr,
    FmodPrecisionAttr,
    PadModeAttr,
    PowPrecisionAttr,
    RecipPrecisionAttr,
    RemPrecisionAttr,
    RsqrtPrecisionAttr,
    SqrtPrecisionAttr,
    TInsertModeAttr,
    CmpModeAttr,
    DivPrecisionAttr,
    ExpPrecisionAttr,
    KernelKindAttr,
    LayoutAttr,
    LogPrecisionAttr,
    PartitionTensorViewType,
    PrintFormatAttr,
    PtrType,
    RoundModeAttr,
    SaturationModeAttr,
    StPhaseAttr,
    TensorViewType,
    TileBufType,
    _dims_str,
    elem_bytes,
    elem_name,
)
from ptofa.ir.dialect.vector import (
    TAbsOp,
    TAddOp,
    TAddsOp,
    TCvtOp,
    TDivOp,
    TDivsOp,
    TExpandsOp,
    TExpOp,
    TLogOp,
    TMaxOp,
    TMaxsOp,
    TMinOp,
    TMinsOp,
    TMulOp,
    TMulsOp,
    TNegOp,
    TRecipOp,
    TReluOp,
    TRsqrtOp,
    TSqrtOp,
    TSubOp,
    TSubsOp,
)

from ptofa.ir.dialect import comm, fused, gathers, gmquery, ipipes, localarray, multitile, partial, quant, reductions, scatter, sorts, structs, sync  # noqa: E402 (families added after the FA subset)
from ptofa.ir.dialect.gmquery import (  # noqa: E402
    GetPrefetchAsyncSessionOp,
    GetTensorViewDimOp,
    GetTensorViewStrideOp,
    GetValidShapeOp,
    MakePrefetchAsyncContextOp,
    PrefetchAsyncContextType,
    TPrefetchAsyncOp,
    TPrefetchOp,
)
from ptofa.ir.dialect.scatter import TScatterOp  # noqa: E402
from ptofa.ir.dialect.structs import DeclareStructOp, StructGetOp, StructSetOp, StructType  # noqa: E402
from ptofa.ir.dialect.partial import TPartAddOp, TPartArgMaxOp, TPartArgMinOp, TPartMaxOp, TPartMinOp, TPartMulOp, TSelSOp  # noqa: E402
from ptofa.ir.dialect.ipipes import (  # noqa: E402
    DeclareGlobalOp,
    DeclareTileOp,
    InitializeL2G2LPipeOp,
    InitializeL2LPipeOp,
    PipeHandleType,
    TAllocOp,
    TFreeOp,
    TPopOp,
    TPushOp,
)
from ptofa.ir.dialect.sync import (  # noqa: E402
    DeclareEventIdArrayOp,
    EventIdArrayGetOp,
    EventIdArraySetOp,
    EventIdArrayType,
    RecordEventOp,
    SetFlagDynOp,
    SetFlagOp,
    SetIntraBlockOp,
    SyncAllOp,
    TSyncOp,
    WaitEventOp,
    WaitFlagDynOp,
    WaitFlagOp,
    WaitIntraBlockOp,
)
from ptofa.ir.dialect.localarray import DeclareLocalArrayOp, LocalArrayGetOp, LocalArraySetOp, LocalArrayType  # noqa: E402
from ptofa.ir.dialect.quant import QuantTypeAttr, SetQuantScalarOp, SetQuantVectorOp, TDequantOp, TQuantOp  # noqa: E402
from ptofa.ir.dialect.sorts import TMrgSortOp, TSort32Op  # noqa: E402
from ptofa.ir.dialect.comm import COMM_OPS, AsyncEventType, AsyncSessionType, CmoCacheInvalidOp, FenceBarrierAllOp  # noqa: E402
from ptofa.ir.dialect.fused import IntToPtrOp, PtrToIntOp, TAddReluOp, TAddSCOp, TConcatIdxOp, TConcatOp, TMatmulBiasOp, TPReluOp, TRowExpandOp, TSubSCOp  # noqa: E402
from ptofa.ir.dialect.gathers import CoalesceAttr, GatherOobAttr, MGatherOp, MScatterOp, ScatterAtomicOpAttr, ScatterOobAttr  # noqa: E402
from ptofa.ir.dialect.multitile import AllocMultiTileOp, MultiTileBufType, MultiTileGetOp  # noqa: E402
from ptofa.ir.dialect.reductions import (  # noqa: E402
    TAddCOp,
    TAxpyOp,
    TColArgMaxOp,
    TColArgMinOp,
    TColMaxOp,
    TColExpandExpdifOp,
    TColMinOp,
    TColProdOp,
    TColSumOp,
    TLReluOp,
    TRowArgMaxOp,
    TRowArgMinOp,
    TRowProdOp,
    TSubCOp,
)

PTO = Dialect(
    "pto",
    [*runtime.OPS, *memory.OPS, *views.OPS, *cube.OPS, *vector.OPS, *rowcol.OPS, *masks.OPS, *pipes.OPS, *tileaccess.OPS, *buffers.OPS,
     *intops.OPS, *multitile.OPS, *reductions.OPS, *gathers.OPS, *fused.OPS, *comm.OPS, *sorts.OPS, *quant.OPS, *localarray.OPS,
     *sync.OPS, *ipipes.OPS, *partial.OPS, *gmquery.OPS, *structs.OPS, *scatter.OPS],
    [*types.ATTRS, *multitile.ATTRS, *gathers.ATTRS, *comm.ATTRS, *quant.ATTRS, *localarray.ATTRS, *sync.ATTRS, *ipipes.ATTRS, *structs.ATTRS, *gmquery.ATTRS],
)


def make_context() -> Context:
    """An xDSL context with the `PTO` dialect and the upstream dialects a `.pto` file uses."""
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, scf.Scf, cf.Cf, PTO):
        ctx.load_dialect(dialect)
    return ctx
