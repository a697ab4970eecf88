"""dominant-op rule on hand-built traces with exact numbers: dominating kernels/ops and known faster alternatives."""

from __future__ import annotations

from support.advise_dominant import by_title, findings
from support.tracefiles import write_trace, x

from opscope.advise import advise
from opscope.ingest import open_trace

# --- hand-built traces with exact numbers --------------------------------------------------------------------

def gpu_step(kernels: list[tuple], capability: tuple[int, int] | None = (8, 0), devices=(0,)) -> list[dict]:
    """One step [0, 10000) µs; each kernel (name, dur[, op, dtypes, device]) launched by its own op."""
    events = [x("ProfilerStep#1", 0, 10_000, cat="user_annotation")]
    t = dict.fromkeys(devices, 100)
    for i, k in enumerate(kernels):
        name, dur = k[0], k[1]
        op = k[2] if len(k) > 2 else None
        dtypes = k[3] if len(k) > 3 else None
        device = k[4] if len(k) > 4 else devices[0]
        at = 10 + 3 * i
        if op:
            events.append(x(op, at, 2, **({"Input type": dtypes} if dtypes else {})))
        events.append(x("cudaLaunchKernel", at + 0.5, 1, cat="cuda_runtime", correlation=i + 1))
        events.append(x(name, t[device], dur, cat="kernel", pid=device, tid=7, device=device, stream=7,
                        correlation=i + 1))
        t[device] += dur
    return events


def header(capability: tuple[int, int] | None, name: str = "NVIDIA A100-SXM4-40GB") -> dict:
    if capability is None:
        return {}
    return {"deviceProperties": [{"id": 0, "name": name, "computeMajor": capability[0],
                                  "computeMinor": capability[1], "totalGlobalMem": 1 << 34}]}


def test_hand_built_gpu_step_exact_savings_and_ranking(tmp_path):
    # kernel time 1000 µs: attention 500 (50%), an fp32 SIMT GEMM 200, max pooling 100, a cuDNN layout transpose
    # 100, gelu 100; A100 (8.0)
    events = gpu_step([("attention_kernel", 500), ("volta_sgemm_128x64_nn", 200, "aten::mm", ["float", "float"]),
                       ("max_pool2d_kernel", 100),
                       ("void cudnn::ops::nchwToNhwcKernel<float>(int)", 100, "aten::cudnn_convolution"),
                       ("gelu_kernel", 100)])
    found = findings(write_trace(tmp_path / "t.json", events, header((8, 0))))
    titles = [f.title for f in found]
    fp32, pool, nchw = by_title(found, "Fp32"), by_title(found, "Max pooling"), by_title(found, "NCHW")
    assert fp32[0].saving_ns == 100_000 and fp32[0].saving_pct == 1.0  # 200 µs x (1 - 1/2) of a 10 ms step
    assert "allow_tf32" in fp32[0].remedy and "NVIDIA A100-SXM4-40GB (compute capability 8.0)" in fp32[0].estimate
    assert pool[0].saving_ns == 100_000 and nchw[0].saving_ns == 100_000  # both go away entirely
    dominant = by_title(found, "attention_kernel")
    assert len(dominant) == 1 and dominant[0].saving_ns is None and "50.0%" in dominant[0].title
    assert dominant[0].evidence[0]["share_pct"] == 50.0 and dominant[0].evidence[0]["time_ns"] == 500_000
    assert len(found) == 4 and titles[-1] == dominant[0].title  # estimate-less findings rank last
    row = fp32[0].evidence[0]
    assert (row["name"], row["op"], row["basis"], row["factor"], row["calls_per_step"]) == \
        ("volta_sgemm_128x64_nn", "aten::mm", "name: fp32 math", "2x", 1.0)


def test_tensor_cores_come_from_the_device_properties(tmp_path):
    kernels = [("volta_sgemm_128x64_nn", 300, "aten::mm", ["float", "float"]), ("k", 700)]
    # a Pascal GPU (6.0) has no tensor cores: the volta_ in the name does not count against the properties
    assert by_title(findings(write_trace(tmp_path / "p.json", gpu_step(kernels), header((6, 0)))), "Fp32") == []
    v100 = by_title(findings(write_trace(tmp_path / "v.json", gpu_step(kernels), header((7, 0)))), "Fp32")
    assert v100[0].saving_ns == 150_000 and "GradScaler" in v100[0].remedy
    mi300 = by_title(findings(write_trace(tmp_path / "m.json", gpu_step(kernels),
                                          header((9, 4), "AMD Instinct MI300X"))), "Fp32")
    assert mi300[0].saving_ns == 150_000 and "bfloat16" in mi300[0].remedy


def test_fp32_from_the_op_dtypes_when_the_name_does_not_say(tmp_path):
    fp32 = [("gemm_kernel_tile128", 400, "aten::addmm", ["float", "float", "float", "Scalar", "Scalar"]),
            ("k", 600)]
    f = by_title(findings(write_trace(tmp_path / "f.json", gpu_step(fp32), header((9, 0)))), "Fp32")
    assert f[0].saving_ns == 200_000 and f[0].evidence[0]["basis"] == "op dtypes: float"
    bf16 = [("gemm_kernel_tile128", 400, "aten::addmm", ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"]), ("k", 600)]
    assert by_title(findings(write_trace(tmp_path / "b.json", gpu_step(bf16), header((9, 0)))), "Fp32") == []
    tf32 = [("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn", 400, "aten::addmm", ["float"] * 3), ("k", 600)]
    assert by_title(findings(write_trace(tmp_path / "t.json", gpu_step(tf32), header((9, 0)))), "Fp32") == []


def test_each_device_is_compared_on_its_own(tmp_path):
    events = gpu_step([("a_kernel", 900, None, None, 0), ("b_kernel", 100, None, None, 0),
                       ("c_kernel", 500, None, None, 1), ("d_kernel", 500, None, None, 1)], devices=(0, 1))
    found = findings(write_trace(tmp_path / "t.json", events, header((8, 0))))
    titles = sorted(f.title for f in found)
    assert any(t.startswith("a_kernel takes 90.0% of the device kernel time on GPU 0") for t in titles)
    assert any(t.startswith("c_kernel takes 50.0% of the device kernel time on GPU 1") for t in titles)
    assert not any("b_kernel" in t for t in titles)


def test_even_kernels_give_nothing(tmp_path):
    events = gpu_step([(f"k{i}", 100) for i in range(6)])
    assert findings(write_trace(tmp_path / "t.json", events, header((8, 0)))) == []


def test_hand_built_cpu_ops_exact(tmp_path):
    # one step of 1000 µs: a depthwise convolution backward (weight [32,1,3,3] on 32 channels) 400 µs, a
    # convolution backward on a 1-channel input (weight [32,1,3,3] too, but not depthwise) 100, max pooling 100,
    # aten::mm 400 (40%: dominant, no known alternative)
    dw = [[8, 32, 10, 10], [8, 32, 10, 10], [32, 1, 3, 3]]
    gray = [[8, 32, 10, 10], [8, 1, 10, 10], [32, 1, 3, 3]]
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("aten::convolution_backward", 0, 400, **{"Input Dims": dw}),
              x("aten::convolution_backward", 400, 100, **{"Input Dims": gray}),
              x("aten::max_pool2d_with_indices", 500, 100, **{"Input Dims": [[8, 32, 10, 10]]}),
              x("aten::mm", 600, 400, **{"Input Dims": [[64, 64], [64, 64]]})]
    found = findings(write_trace(tmp_path / "t.json", events))
    dwf = by_title(found, "Depthwise")
    assert len(dwf) == 1 and dwf[0].saving_ns == 200_000 and dwf[0].saving_pct == 20.0
    assert [r["shapes"] for r in dwf[0].evidence] == ["[[8,32,10,10],[8,32,10,10],[32,1,3,3]]"]
    assert by_title(found, "Max pooling")[0].saving_ns == 100_000
    mm = by_title(found, "aten::mm")
    assert len(mm) == 1 and mm[0].saving_ns is None and "40.0% of the host op self time" in mm[0].title
    assert len(found) == 3


def test_cpu_trace_without_steps_and_a_trace_with_nothing_to_compare(tmp_path):
    events = [x("aten::addmm", 0, 800), x("aten::relu", 800, 200)]
    found = findings(write_trace(tmp_path / "t.json", events))
    assert [f.title for f in found] == ["aten::addmm takes 80.0% of the host op self time (800.000 us per trace)"]
    empty = advise(open_trace(write_trace(tmp_path / "e.json", [x("note", 0, 10, cat="user_annotation")])),
                   only=["dominant-op"])
    assert empty.findings == [] and empty.not_applicable == {}


def test_depthwise_backward_kernels_on_a_gpu_by_name_or_by_the_ops_weight(tmp_path):
    dw = [[8, 32, 10, 10], [8, 32, 10, 10], [32, 1, 3, 3]]
    # both kernels launched inside a depthwise convolution backward (weight [32,1,3,3] on 32 channels): one named
    # so, one a generic cuDNN name found through its op
    events = [x("ProfilerStep#1", 0, 10_000, cat="user_annotation"),
              x("aten::convolution_backward", 10, 5, **{"Input Dims": dw}),
              x("cudaLaunchKernel", 11, 1, cat="cuda_runtime", correlation=1),
              x("cudaLaunchKernel", 13, 1, cat="cuda_runtime", correlation=2),
              x("aten::mm", 20, 5, **{"Input Dims": [[64, 64], [64, 64]]}),
              x("cudaLaunchKernel", 21, 1, cat="cuda_runtime", correlation=3),
              x("void at::native::conv_depthwise2d_grad_weight_kernel<float>(int)", 100, 300, cat="kernel", pid=0,
                tid=7, device=0, stream=7, correlation=1),
              x("cudnn::cnn::wgrad2d_grouped_direct_kernel", 400, 100, cat="kernel", pid=0, tid=7, device=0,
                stream=7, correlation=2),
              x("gemm_k", 500, 600, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=3)]
    found = findings(write_trace(tmp_path / "t.json", events, header((8, 0))))
    f = by_title(found, "Depthwise")
    assert len(f) == 1 and f[0].saving_ns == 200_000  # (300 + 100) µs x (1 - 1/2)
    assert {r["basis"] for r in f[0].evidence} == {"name: depthwise backward",
                                                   "aten::convolution_backward with weight [32,1,3,3]"}
    assert "cudnn.benchmark" in f[0].remedy


def test_an_unnamed_kernel_and_op_are_matched_as_empty_names_not_a_type_error(tmp_path):
    # a hostile trace (found by the fuzz test): the dominating kernel and its launching op have no "name"; they
    # match no known alternative, so the only finding is the dominant one, at 100% of the step's kernel time
    events = gpu_step([("NAME", 500, "aten::conv2d")])
    for e in events:
        if e["name"] in ("NAME", "aten::conv2d"):
            del e["name"]
    found = findings(write_trace(tmp_path / "t.json", events))
    assert len(found) == 1 and "100.0%" in found[0].title and found[0].saving_ns is None


def test_only_alternatives_with_a_finding_are_offered_for_measuring(tmp_path):
    # one step: a depthwise backward of 40 us (4% of the 1000 us of op self time: under ALTERNATIVE_SHARE, no
    # finding) and an NCHW depthwise forward convolution of 100 us (10%: a finding); --measure measures only what a
    # finding uses
    from opscope.advise.context import AdviceContext
    from opscope.advise.rules.dominant import ALTERNATIVE_SHARE, matched_items

    dw = [[8, 32, 10, 10], [8, 32, 10, 10], [32, 1, 3, 3]]
    fwd = [[8, 32, 10, 10], [32, 1, 3, 3], [32]]
    nchw = [[3200, 100, 10, 1], [9, 9, 3, 1], [1]]
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("aten::convolution_backward", 0, 40, **{"Input Dims": dw}),
              x("aten::convolution", 40, 100, **{"Input Dims": fwd, "Input Strides": nchw}),
              x("aten::mm", 140, 860, **{"Input Dims": [[64, 64], [64, 64]]})]
    path = write_trace(tmp_path / "t.json", events)
    assert 0.04 < ALTERNATIVE_SHARE <= 0.10
    found = findings(path)
    assert not by_title(found, "Depthwise-convolution backward") and len(by_title(found, "NCHW")) == 1, found
    _, claimed = matched_items(AdviceContext(open_trace(path)))
    assert [(alt.id, item.name) for alt, item, _ in claimed] == [("nchw-conv", "aten::convolution")]
    # at 50 us (5%) the depthwise backward gets its finding, and is measured too
    events[1] = x("aten::convolution_backward", 0, 50, **{"Input Dims": dw})
    events[2] = x("aten::convolution", 50, 100, **{"Input Dims": fwd, "Input Strides": nchw})
    events[3] = x("aten::mm", 150, 850, **{"Input Dims": [[64, 64], [64, 64]]})
    path = write_trace(tmp_path / "t2.json", events)
    assert len(by_title(findings(path), "Depthwise-convolution backward")) == 1
    _, claimed = matched_items(AdviceContext(open_trace(path)))
    assert sorted(alt.id for alt, _, _ in claimed) == ["depthwise-backward", "nchw-conv"]
