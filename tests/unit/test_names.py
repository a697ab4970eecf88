"""Demangled and short kernel names, and the Python API of ops, against hand-written strings."""

from __future__ import annotations

import pyarrow as pa
from support.tracefiles import small_gpu_trace, write_trace, x

from opscope.analyses.kernels import kernel_table
from opscope.analyses.names import (
    demangle,
    distinct_forms,
    distinct_short_names,
    map_distinct,
    python_api,
    short_name,
    short_names,
)
from opscope.ingest import open_trace

# A name as nvcc mangles it, and what the C++ ABI says it means (written out by hand).
FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"
FILL_DEMANGLED = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                  "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")


def test_the_cxa_demangle_library_works_here():
    import cxxfilt

    assert cxxfilt.demangle(FILL) == FILL_DEMANGLED
    assert demangle(FILL) == FILL_DEMANGLED


def test_names_that_are_not_mangled_or_are_broken_are_kept():
    for name in ("volta_sgemm_128x64_nn", "_Zfoo", "_Z", "", "Memcpy HtoD (Pageable -> Device)", "ncclKernel_x"):
        assert demangle(name) == name


SHORT = {
    FILL_DEMANGLED: "at::native::vectorized_elementwise_kernel",
    FILL: "at::native::vectorized_elementwise_kernel",
    # a return type with templates and a comparison in it (vllm)
    "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
    "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, "
    "c10::BFloat16 const*, float, int, int)": "vllm::fused_add_rms_norm_kernel",
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 4, 64, 64>(float*, "
    "at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 64, 64>, int)":
        "at::native::(anonymous namespace)::CatArrayBatchedCopy",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>"
    "(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
    "operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, int)": "at::native::elementwise_kernel",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": "ncclKernel_AllReduce_RING_LL_Sum_float",
    "volta_sgemm_128x64_nn": "volta_sgemm_128x64_nn",
    # Tensile GEMMs keep their problem type and tile shape, not their ~60 tuning parameters
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
    "CADS0_DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMBSK_GLS0_ISA942_IU1_K1_WS64_WG64_4_1":
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1",
    "Memcpy HtoD (Pageable -> Device)": "Memcpy HtoD (Pageable -> Device)",
    "Memset (Device)": "Memset (Device)",
    # generic entry points keep the kernel they wrap
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4>(cutlass_80_tensorop_s1688gemm_"
    "64x64_16x6_nt_align4::Params)": "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4>",
    "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, "
    "int, int, int>(int*, int*, int*, int const*, long*, long const*, int*, int const*, int, int, int)":
        "cub::DeviceRadixSortOnesweepKernel",
}


def test_short_forms():
    for full, short in SHORT.items():
        assert short_name(full) == short, full


def test_each_distinct_name_is_mapped_once():
    seen: list[str] = []
    values = pa.array(["b", "a", "b", None, "a", "b"]).dictionary_encode()
    out = map_distinct(pa.chunked_array([values, values]), lambda v: seen.append(v) or v.upper())
    assert out.to_pylist() == ["B", "A", "B", None, "A", "B"] * 2
    assert sorted(seen) == ["a", "b"]


def test_distinct_short_names_keep_what_tells_names_apart():
    five = "void k<float, 5ul>(at::Accessor<float, 2ul>, int)"
    two = "void k<float, 2ul>(at::Accessor<float, 2ul>, int)"
    two_long = "void k<float, 2ul>(at::Accessor<float, 2ul>, long)"
    alone = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float)"
    out = distinct_short_names(pa.array([five, two, alone, "volta_sgemm_128x64_nn", five, None])).to_pylist()
    # same short form "k": the template arguments tell them apart; the others stay short
    assert out == ["k<float, 5ul>", "k<float, 2ul>", "at::native::vectorized_elementwise_kernel",
                   "volta_sgemm_128x64_nn", "k<float, 5ul>", None]
    # same template arguments too: only the whole name tells them apart
    out = distinct_short_names(pa.array([two, two_long, five])).to_pylist()
    assert out == [two, two_long, "k<float, 5ul>"]


def test_python_api_of_tensorflow_ops():
    # tf.raw_ops holds every op type under its own CamelCase name; the public functions are TF's documented ones.
    assert python_api("Conv2DBackpropInput") == "tf.raw_ops.Conv2DBackpropInput"
    assert python_api("FusedBatchNormV3") == "tf.raw_ops.FusedBatchNormV3"
    assert python_api("MatMul") in ("tf.matmul", "tf.linalg.matmul")
    assert python_api("Relu") == "tf.nn.relu"
    assert python_api("ParallelFor") is None  # an XProf region, not an op type
    assert python_api("MatMul", framework="pytorch") is None  # a CamelCase annotation in a PyTorch trace
    assert python_api("MatMul", framework="onnxruntime") is None  # an ONNX op type of the same name
    assert python_api("MatMul", framework="tensorflow") == python_api("MatMul")
    assert python_api("autograd::engine::evaluate_function: AddmmBackward0") is None


def test_kernels_short_and_full_names(tmp_path):
    events = small_gpu_trace() + [
        x("cudaLaunchKernel", 1500, 10, cat="cuda_runtime", correlation=4),
        x("cudaLaunchKernel", 1600, 10, cat="cuda_runtime", correlation=5),
        x(FILL, 1700, 5, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=4),
        x("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
          "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
          1800, 7, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=5),
    ]
    # and the fill kernel once more, written demangled: the same kernel as its mangled name
    events.append(x(FILL_DEMANGLED, 1900, 3, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=6))
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    # two different kernels share the short form vectorized_elementwise_kernel: each keeps its template arguments
    # (no return type, no parameters) and has a row of its own; the fill kernel's two spellings are one row
    short = {r["name"]: r for r in kernel_table(trace, names="short").to_pylist()}
    fill = short["at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                 "at::detail::Array<char*, 1> >"]
    add = short["at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                "at::detail::Array<char*, 3> >"]
    assert (fill["calls"], fill["total_ns"], fill["variants"]) == (2, 8_000, 2)
    assert (add["calls"], add["total_ns"], add["variants"]) == (1, 7_000, 1)
    assert "at::native::vectorized_elementwise_kernel" not in short
    full = {r["name"]: r["calls"] for r in kernel_table(trace, names="full").to_pylist()}
    assert full[FILL_DEMANGLED] == 2 and FILL not in full
    raw = {r["name"] for r in kernel_table(trace).to_pylist()}
    assert FILL in raw


def test_short_names_encoded_gives_one_code_per_short_name():
    """Two kernels whose names differ only in template arguments share a short name: as a dictionary array they share
    one code, so grouping on the codes groups the short names (the kernel table groups this way)."""
    names = pa.array(["_Z3fooIiEvv", "_Z3fooIfEvv", "bar", None, "_Z3fooIiEvv"]).dictionary_encode()
    encoded = short_names(names, encoded=True)
    assert pa.types.is_dictionary(encoded.type)
    assert encoded.cast(pa.string()).to_pylist() == short_names(names).to_pylist() == ["foo", "foo", "bar", None,
                                                                                      "foo"]
    assert encoded.indices.to_pylist()[:3] == [0, 0, 1] and len(encoded.dictionary) == 2
    grouped = pa.table({"name": encoded, "n": [1, 2, 3, 4, 5]}).group_by("name").aggregate([("n", "sum")])
    assert dict(zip(grouped["name"].cast(pa.string()).to_pylist(), grouped["n_sum"].to_pylist())) == \
        {"foo": 8, "bar": 3, None: 4}


def test_clone_suffixes_are_not_the_name():
    # ROCm writes its kernels' descriptors as "... [clone .kd]": the last word of the demangled name, which the short
    # form used to keep, so every ROCm kernel read "[clone .kd]"
    assert short_name("void flash_fwd_kernel<Traits<128, 64>, false>(Flash_fwd_params) [clone .kd]") == \
        "flash_fwd_kernel"
    assert short_name("attention_kernel(float*, int) [clone .kd]") == "attention_kernel"
    assert short_name("my_kernel [clone .kd]") == "my_kernel"
    assert short_name("void at::native::k<float>(int) [clone .cold] [clone .isra.0]") == "at::native::k"
    assert short_name("input_transpose_fusion.kd") == "input_transpose_fusion.kd"  # an XLA fusion's symbol: kept
    # a Tensile GEMM's descriptor symbol is cut after its tile shape, as the GEMM's own name is
    tensile = "Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_WGM1"
    assert short_name(tensile + ".kd") == short_name(tensile) == "Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1"


def test_distinct_forms_never_give_two_kernels_one_name():
    ck = ("void ck_tile::kentry<1, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<{}>, "
          "ck_tile::Default2DEpilogue<float>>>(ck_tile::FmhaFwdKernel<int>::Kargs) [clone .kd]")
    names = [ck.format(t) for t in ("float", "half", "bf16", "fp8", "int8")]  # five attention kernels
    names += ["Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_SN_1LDSB0_APM1",
              "Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_SN_1LDSB1_APM1",  # Tensile: the same tile, tuned apart
              "triton_poi_fused_add_0", "triton_poi_fused_add_1", "loop_transpose_fusion.kd",
              "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4>(Params)"]
    forms = distinct_forms(names)
    assert len(set(forms.values())) == len(names), forms
    # the ones that were alone in their short form keep it
    assert forms["triton_poi_fused_add_0"] == "triton_poi_fused_add_0"
    assert forms[names[-1]] == "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4>"
    # the five CK kernels share "ck_tile::kentry<ck_tile::FmhaFwdKernel>": each keeps its template arguments
    assert forms[names[0]].startswith("ck_tile::kentry<1, ck_tile::FmhaFwdKernel<") and "float" in forms[names[0]]
    # one kernel written mangled and demangled is one kernel: one form
    assert distinct_forms([FILL, FILL_DEMANGLED])[FILL] == distinct_forms([FILL, FILL_DEMANGLED])[FILL_DEMANGLED]
