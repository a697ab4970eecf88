"""A hand-built pair of runs of the same model on two vendors, for the device-time-by-op and class comparisons of
``opscope diff``: the same ops with the same input shapes launch differently named kernels (cuBLAS against Tensile,
cuDNN against MIOpen), and the vendors' convolution ops differ under the same ``aten::conv2d``."""

from __future__ import annotations

from support.tracefiles import x

LINEAR = [[4, 8], [16, 8], [16]]
ADDMM = [[16], [4, 8], [8, 16], [], []]
CONV = [[1, 3, 8, 8], [4, 3, 3, 3]]
CUBLAS_GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
               "kernel__5x_cublas")
TENSILE_GEMM = ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x128_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_"
                "CLR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1")
CUDNN_CONV = "cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8>"
MIOPEN_CONV = ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt64x64x16_wt16x16x4_ws1x1_wr2x2_ta1x1x4x1_1x16x1x16_"
               "tb1x1x4x1_1x16x1x16_me")


def _launch(ts, corr, runtime="cudaLaunchKernel"):
    return x(runtime, ts, 1, cat="cuda_runtime", correlation=corr)


def _kernel(name, ts, dur, corr):
    return x(name, ts, dur, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=corr)


def _op(name, ts, dur, dims=None):
    return x(name, ts, dur, **({"Input Dims": dims} if dims is not None else {}))


def base_events() -> list[dict]:
    """The "H100" run: two steps of 1000 us. Per step: aten::linear (LINEAR) > aten::addmm > a cuBLAS GEMM, 100 us;
    aten::conv2d (CONV) > aten::cudnn_convolution > a cuDNN CUTLASS kernel 40 us and a layout kernel 10 us;
    aten::add on [4, 16] > an elementwise kernel 20 us. Step 1 also aten::softmax > a softmax kernel 30 us; step 2
    a kernel launched outside any op, 6 us. Device time 2 x 170 + 30 + 6 = 376 us."""
    out: list[dict] = []
    for i, s in enumerate((0, 1000)):
        c = 100 * (i + 1)
        out += [
            x(f"ProfilerStep#{i + 1}", s, 1000, cat="user_annotation"),
            _op("aten::linear", s + 10, 60, LINEAR), _op("aten::addmm", s + 12, 50, ADDMM), _launch(s + 14, c),
            _kernel(CUBLAS_GEMM, s + 20, 100, c),
            _op("aten::conv2d", s + 200, 60, CONV), _op("aten::cudnn_convolution", s + 205, 50, CONV),
            _launch(s + 207, c + 1), _launch(s + 209, c + 2),
            _kernel("nchwToNhwcKernel", s + 210, 10, c + 1), _kernel(CUDNN_CONV, s + 220, 40, c + 2),
            _op("aten::add", s + 300, 10, [[4, 16], [4, 16], []]), _launch(s + 301, c + 3),
            _kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
                    s + 310, 20, c + 3),
        ]
    out += [_op("aten::softmax", 400, 10, [[4, 16], []]), _launch(401, 50),
            _kernel("void (anonymous namespace)::softmax_warp_forward<float, float, float, 4, false, false>(float*, "
                    "float const*, int, int, int, bool const*, int, bool)", 410, 30, 50),
            _launch(1500, 60), _kernel("mystery_kernel", 1510, 6, 60)]
    return out


def new_events() -> list[dict]:
    """The "MI300" run: two steps of 1200 us. Per step: aten::linear (LINEAR) > aten::addmm > a Tensile GEMM 150 us;
    aten::conv2d (CONV) > aten::miopen_convolution > an MIOpen iGEMM kernel 60 us and a transpose 8 us; aten::add on
    [8, 16] (other shapes) > an elementwise kernel 24 us; aten::gelu > an elementwise kernel 12 us. Device time
    2 x 254 = 508 us."""
    out: list[dict] = []
    for i, s in enumerate((0, 1200)):
        c = 10 * (i + 1)
        out += [
            x(f"ProfilerStep#{i + 1}", s, 1200, cat="user_annotation"),
            _op("aten::linear", s + 10, 60, LINEAR), _op("aten::addmm", s + 12, 50, ADDMM),
            _launch(s + 14, c, "hipExtModuleLaunchKernel"), _kernel(TENSILE_GEMM, s + 20, 150, c),
            _op("aten::conv2d", s + 200, 60, CONV), _op("aten::miopen_convolution", s + 205, 50, CONV),
            _launch(s + 207, c + 1, "hipLaunchKernel"), _launch(s + 209, c + 2, "hipExtModuleLaunchKernel"),
            _kernel("batched_transpose_32x16_half", s + 210, 8, c + 1), _kernel(MIOPEN_CONV, s + 220, 60, c + 2),
            _op("aten::add", s + 300, 10, [[8, 16], [8, 16], []]), _launch(s + 301, c + 3, "hipLaunchKernel"),
            _kernel("void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_nocast<"
                    "at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> "
                    "const&)::{lambda(int, bool)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::"
                    "CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::"
                    "{lambda(int, bool)#1})", s + 320, 24, c + 3),
            _op("aten::gelu", s + 400, 10, [[8, 16], []]), _launch(s + 401, c + 4, "hipLaunchKernel"),
            _kernel("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::"
                    "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#3}::"
                    "operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::"
                    "GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() "
                    "const::{lambda()#3}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)",
                    s + 410, 12, c + 4),
        ]
    return out
