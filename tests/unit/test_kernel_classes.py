"""Kernel classes: real kernel names (copied from the traces under ../shared/traces: H100 and MI300 runs of the same
models, B200, MI210, torch.compile, HTA's and Kineto's samples) with the class each one is, written by hand."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support import make_trace, row

from opscope.analyses.kernel_classes import CLASSES, class_table, classify, kernel_class, name_class, op_class

US = 1000

#: (kernel name as the trace writes it, launching op or None, kind, the class it is)
CASES = [
    # GEMM: cuBLAS/cuBLASLt (H100), CUTLASS, nvjet and trtllm-gen (B200), Tensile/hipBLASLt (MI300), old cuBLAS
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x"
     "_cublas", "aten::addmm", "kernel", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>(cutlass_80_tensorop_"
     "bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)", "aten::addmm", "kernel", "gemm"),
    ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "aten::addmm", "kernel", "gemm"),
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_schedP2x1x2x3"
     "_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f", "vllm::moe_forward", "kernel", "gemm"),
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x128_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_"
     "DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1_LBSPPA512_LBSPPB256_LBSPPM0_LPA16_LPB16_"
     "LPM0_LRVW8_LWPMn1_MIAV0_MIWT2_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS16_NLCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3"
     "_SS1_SPO0_SRVW0_SSO0_SVW2_SK0_SKXCCM0_TLDS1_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA2_VWB1_WSGRA0_WSGRB0_WS64_WG"
     "32_8_1", "aten::addmm", "kernel", "gemm"),
    ("volta_sgemm_128x64_nt", None, "kernel", "gemm"),
    # cuBLAS helpers name the library only in their template arguments
    ("void reduce_1Block_kernel<float, 128, 7, cublasGemvTensorStridedBatched<float>, cublasGemvTensorStridedBatched"
     "<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16> >(float const*, float, "
     "cublasGemvTensorStridedBatched<float>, int, float const*, float, cublasGemvTensorStridedBatched<__nv_bfloat16 "
     "const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, cublasPointerMode_t, cublasLtEpilogue_t, "
     "cublasGemvTensorStridedBatched<biasType<cublasGemvTensorStridedBatched<__nv_bfloat16>::value_type, "
     "float>::type const>)", "aten::mm", "kernel", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, false>(cublasLt::"
     "cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*, float "
     "const*, float*, void*, long, float*, int*)", "aten::addmm", "kernel", "gemm"),
    # fbgemm_gpu is a library's name, not a GEMM: its permute kernel moves data
    ("void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int, int, int const*, "
     "decltype(nullptr) const*, int const*, int const*, int const*, int*, decltype(nullptr)*)", None, "kernel",
     "elementwise"),
    # convolution: cuDNN's CUTLASS and xmma kernels and its layout helpers (H100), MIOpen (MI300, MI210)
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8>("
     "cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8::Params)", "aten::cudnn_convolution",
     "kernel", "conv"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, "
     "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, "
     "__nv_bfloat16*)", "aten::cudnn_convolution", "kernel", "conv"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1"
     "_g1_tensor16x8x8_alignc4_execute_kernel_cudnn", "aten::cudnn_convolution", "kernel", "conv"),
    ("cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", None, "kernel", "conv"),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt64x64x16_wt16x16x4_ws1x1_wr2x2_ta1x1x4x1_1x16x1x16_tb1x1x4x1_1x16x1x16_me",
     "aten::miopen_convolution", "kernel", "conv"),
    ("Im2d2Col_v2", "aten::miopen_convolution", "kernel", "conv"),
    # MIOpen's transpose and tensor-op helpers: a convolution's helpers when a convolution launched them
    ("batched_transpose_32x16_half", "aten::miopen_convolution", "kernel", "conv"),
    ("SubTensorOpWithScalar1d", "aten::miopen_convolution", "kernel", "conv"),
    ("batched_transpose_32x16_half", None, "kernel", "elementwise"),
    # a name that says nothing: its op decides (cuDNN's FFT convolution)
    ("void fft2d_r2c_32x32<float, false, 5u, true>(float2*, float const*, int, int, int, int, int, int, int, int, int, "
     "cudnn::reduced_divisor, bool, int2, int, int)", "aten::cudnn_convolution", "kernel", "conv"),
    # attention: flash (H100), AOTriton (MI300), fmha (B200), paged attention (ROCm)
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, false, "
     "false, false, false, true, false>(pytorch_flash::Flash_fwd_params)", "aten::_flash_attention_forward", "kernel",
     "attention"),
    ("attn_fwd", "aten::_flash_attention_forward", "kernel", "attention"),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext",
     "vllm::unified_attention_with_output", "kernel", "attention"),
    # softmax
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
     "aten::_softmax", "kernel", "softmax"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int,"
     " int, int, bool const*, int, bool)", "aten::_softmax", "kernel", "softmax"),
    # reductions and normalisations
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
     "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
     "aten::native_layer_norm", "kernel", "reduction_norm"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
     "float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
     "float>, unsigned int, float, 4, 4>)", "aten::mean", "kernel", "reduction_norm"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(cudnnTensorStruct, float const*, "
     "cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, "
     "float)", "aten::cudnn_batch_norm", "kernel", "reduction_norm"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long, long, long, "
     "int, int, int, int, int, int, int, int, int, int, float*, long*)", "aten::max_pool2d_with_indices", "kernel",
     "reduction_norm"),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long, long, float const*, "
     "float const*, float const*, float const*, float*, float*)", "aten::native_layer_norm_backward", "kernel",
     "reduction_norm"),
    # elementwise and data movement
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, "
     "3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)", "aten::add", "kernel",
     "elementwise"),
    ("void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_nocast<at::native::"
     "CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::"
     "{lambda(int, bool)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> >("
     "at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int, bool)#1})",
     "aten::add", "kernel", "elementwise"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, "
     "unsigned int, 3, 64, 64>(at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::(anonymous namespace)::"
     "CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 64, 64>, at::native::"
     "(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)", "aten::cat", "kernel",
     "elementwise"),
    # Triton kernels of torch.compile (inductor)
    ("triton_poi_fused__unsafe_view_mul_silu_2", "triton_poi_fused__unsafe_view_mul_silu_2", "kernel", "elementwise"),
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "triton_red_fused_add_mean_mul_pow_rsqrt_0", "kernel",
     "reduction_norm"),
    # communication, copies, memsets
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "record_param_comms", "comm", "comm"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, "
     "unsigned int**, unsigned long, unsigned long)", "symm_mem::multimem_all_reduce_", "kernel", "comm"),
    ("Memcpy DtoD (Device -> Device)", "aten::copy_", "memcpy", "memcpy"),
    ("Memset (Device)", None, "memset", "memset"),
    # neither the name nor the op says
    ("void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, "
     "cutlass::bfloat16_t, 4, true> >(moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, 4, "
     "true>)", "vllm::moe_forward", "kernel", "other"),
]


@pytest.mark.parametrize(("name", "op", "kind", "expected"), CASES, ids=[c[0][:48] for c in CASES])
def test_real_kernel_names_get_their_class(name, op, kind, expected):
    assert kernel_class(name, op, kind) == expected


def test_the_vectorized_form_gives_the_same_classes_per_row():
    names = pa.array([c[0] for c in CASES] * 2).dictionary_encode()
    ops = pa.array([c[1] for c in CASES] * 2)
    kinds = pa.array([c[2] for c in CASES] * 2)
    assert classify(kinds, names, ops).to_pylist() == [c[3] for c in CASES] * 2


@pytest.mark.parametrize(("op", "expected"), [
    ("aten::addmm", "gemm"), ("aten::linear", "gemm"), ("aten::bmm", "gemm"), ("aten::_scaled_mm", "gemm"),
    ("aten::cudnn_convolution", "conv"), ("aten::miopen_convolution", "conv"), ("aten::conv2d", "conv"),
    ("aten::_scaled_dot_product_flash_attention", "attention"), ("aten::_efficient_attention_forward", "attention"),
    ("aten::_softmax", "softmax"), ("aten::log_softmax", "softmax"),
    ("aten::native_layer_norm", "reduction_norm"), ("aten::native_batch_norm", "reduction_norm"),
    ("aten::sum", "reduction_norm"), ("aten::mean", "reduction_norm"),
    ("aten::add_", "elementwise"), ("aten::copy_", "elementwise"), ("aten::gelu", "elementwise"),
    ("aten::fill_", "elementwise"), ("aten::normal_", "elementwise"),  # random numbers, not a norm
    ("record_param_comms", "comm"), ("c10d::allreduce_", "comm"),
    ("vllm::moe_forward", None), ("Torch-Compiled Region: 0/0", None),
])
def test_op_classes(op, expected):
    assert op_class(op) == expected


def test_a_data_movement_name_is_uncertain_and_a_gemm_name_certain():
    assert name_class("batched_transpose_32x16_half") == ("elementwise", False)
    assert name_class("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT") == ("gemm", True)
    assert name_class("fft2d_r2c_32x32") == (None, False)


def test_class_table_adds_up_device_time_per_class_in_class_order():
    """One step: aten::linear's GEMM (100 us), aten::cudnn_convolution's transpose helper (10 us, conv) and its
    FFT kernel (30 us, conv by its op), aten::add's elementwise kernel (20 us), a memcpy (40 us), and a kernel
    outside any op whose name says nothing (5 us, other). Device time 205 us."""
    def launch(ts, corr):
        return row("runtime", "cudaLaunchKernel", ts, 1, correlation=corr)

    def work(name, ts, dur, corr, kind="kernel"):
        return row(kind, name, ts, dur, pid=0, tid=7, device=0, stream=7, correlation=corr)

    trace = make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 1000),
        row("cpu_op", "aten::linear", 10, 50), row("cpu_op", "aten::addmm", 11, 40), launch(12, 1),
        row("cpu_op", "aten::cudnn_convolution", 100, 50), launch(101, 2), launch(102, 3),
        row("cpu_op", "aten::add", 200, 10), launch(201, 4),
        row("cpu_op", "aten::copy_", 300, 10), launch(301, 5),
        launch(400, 6),
        work("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
             "kernel__5x_cublas", 20, 100, 1),
        work("batched_transpose_32x16_half", 130, 10, 2),
        work("fft2d_r2c_32x32", 140, 30, 3),
        work("vectorized_elementwise_kernel", 210, 20, 4),
        work("Memcpy DtoD (Device -> Device)", 310, 40, 5, kind="memcpy"),
        work("mystery_kernel", 410, 5, 6),
    ])
    table = class_table(trace)
    assert table.to_pylist() == [
        {"class": "gemm", "calls": 1, "total_ns": 100 * US, "pct": round(100 * 100 / 205, 2)},
        {"class": "conv", "calls": 2, "total_ns": 40 * US, "pct": round(100 * 40 / 205, 2)},
        {"class": "elementwise", "calls": 1, "total_ns": 20 * US, "pct": round(100 * 20 / 205, 2)},
        {"class": "memcpy", "calls": 1, "total_ns": 40 * US, "pct": round(100 * 40 / 205, 2)},
        {"class": "other", "calls": 1, "total_ns": 5 * US, "pct": round(100 * 5 / 205, 2)},
    ]
    assert [r["class"] for r in table.to_pylist()] == [c for c in CLASSES if c in {r["class"] for r in
                                                                                    table.to_pylist()}]
    assert class_table(make_trace([row("cpu_op", "aten::add", 0, 1)])).num_rows == 0
