// Generated from ptofa/kernels/argspec.py by `python -m ptofa.launch.toolchain gen-caller`; do not edit.
// Host launcher of the kernel attn_tiny. bisheng compiles this file in mix mode
// with -DKERNEL_CPP="\"<ptoas output>\"" (docs/sources.md §3.8, compile.sh).
#include <cstdint>

#include KERNEL_CPP

extern "C" int32_t rtGetC2cCtrlAddr(uint64_t* addr, uint32_t* len);

constexpr int32_t RC_OK = 0;
constexpr int32_t RC_FFTS_FAILED = 1;

extern "C" int32_t call_attn_tiny(
        uint32_t block_dim,
        void* stream,
        uint8_t* ring,
        uint8_t* q,
        uint8_t* k,
        uint8_t* v,
        uint8_t* o,
        int64_t s0,
        int64_t s1,
        float scale)
{
    // The entry's first argument is the FFTS base that cube/vector cross-core flags use.
    uint64_t ffts_addr = 0;
    uint32_t ffts_len = 0;
    if (rtGetC2cCtrlAddr(&ffts_addr, &ffts_len) != 0 || ffts_addr == 0) {
        return RC_FFTS_FAILED;
    }
    attn_tiny<<<block_dim, nullptr, stream>>>(
        (__gm__ int64_t*)ffts_addr,
        (__gm__ float*)ring,
        (__gm__ half*)ring,
        (__gm__ half*)q,
        (__gm__ half*)k,
        (__gm__ half*)v,
        (__gm__ half*)o,
        s0,
        s1,
        scale);
    return RC_OK;
}
