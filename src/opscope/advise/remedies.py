"""Remedies in the trace's own framework: the same finding asks a PyTorch program for torch.compile and an ONNX
Runtime session for its CUDA-graph option. A rule whose remedy depends on the framework looks it up here by the
framework that wrote the trace (:func:`opscope.analyses.names.framework_of`; ``None``: not known, the text names no
framework's API).
"""

from __future__ import annotations

from opscope.analyses.names import framework_of
from opscope.model.trace import Trace

#: Launch-bound steps: launch the step's kernels at once, or fewer of them.
LAUNCH_BOUND = {
    "pytorch": ("capture the step in a CUDA graph: torch.compile(model, mode=\"reduce-overhead\") or torch.cuda.graphs "
                "(static shapes needed); or fuse small ops with torch.compile to launch fewer kernels; raise the "
                "batch size so each kernel does more work"),
    "tensorflow": ("compile the step with XLA (tf.function(jit_compile=True)) so small ops fuse into fewer kernels; "
                   "raise the batch size so each kernel does more work"),
    "jax": ("jit the whole step (one jax.jit over the update, lax.scan for loops) so XLA fuses ops, and let XLA "
            "replay its kernels as command buffers (CUDA graphs: --xla_gpu_enable_command_buffer); raise the batch "
            "size so each kernel does more work"),
    "onnxruntime": ("enable CUDA graphs in the CUDA execution provider (provider option enable_cuda_graph=1; static "
                    "shapes, inputs bound with IOBinding) and keep graph optimizations at ORT_ENABLE_ALL so small "
                    "nodes fuse; raise the batch size"),
    "migraphx": ("compile with fusion on (the default passes; migraphx-driver compile --exhaustive-tune to tune "
                 "the kernels) and raise the batch size so each kernel does more work"),
    None: ("launch the step's kernels at once (a CUDA/HIP graph) or fewer of them (fuse small ops with the "
           "framework's compiler); raise the batch size so each kernel does more work"),
}

#: Host-device synchronisation inside the step, in general.
SYNC = {
    "pytorch": "torch.cuda.set_sync_debug_mode('warn') reports every synchronising call with its Python line",
    "tensorflow": ("keep values on the device inside tf.function (no .numpy() or Python branching on tensors in the "
                   "step); read metrics every N steps"),
    "jax": ("do not read device values in the step (float(x), np.asarray(x), x.block_until_ready(), printing): "
            "keep them as arrays and fetch them every N steps"),
    "onnxruntime": ("bind inputs and outputs on the device (IOBinding) so that run() does not copy results back and "
                    "wait each call; read them when needed"),
    "migraphx": "keep arguments on the device (offload_copy off) and read results back only when needed",
    None: "find the call that reads a device value on the host or synchronizes, and keep the value on the device",
}

#: Pageable host-to-device copies.
PINNED = {
    "pytorch": ("allocate the host tensors in pinned memory and copy asynchronously: DataLoader(pin_memory=True), "
                "or x.pin_memory() (once, for a reused buffer) and x.to(device, non_blocking=True)"),
    "tensorflow": "prefetch the input to the device (tf.data ... .prefetch, tf.data.experimental.prefetch_to_device)",
    "jax": "put the next batch on the device ahead of the step (jax.device_put on a prefetch thread)",
    "onnxruntime": "bind the inputs on the device with IOBinding (copy them once, from pinned memory, ahead of run())",
    "migraphx": "allocate the inputs on the device (hip_allocate / offload_copy off) and copy them once",
    None: "copy from pinned (page-locked) host memory, asynchronously and ahead of the step",
}

#: A dominant op or kernel: what to compare it against.
COMPARE_AGAINST = {
    "pytorch": "a fused or compiled version (torch.compile), dtypes (bf16/fp16) or layouts (channels_last)",
    "tensorflow": "XLA (tf.function(jit_compile=True)), mixed precision (tf.keras.mixed_precision) or other layouts",
    "jax": "other XLA fusions (jax.jit boundaries), dtypes (bf16) or layouts",
    "onnxruntime": "other execution providers or their options (TensorRT, cuDNN conv algo search), fp16 models or "
                   "other graph optimizations",
    "migraphx": "other tuned kernels (migraphx-driver --exhaustive-tune), fp16/int8 quantization or layouts",
    None: "other implementations, dtypes or layouts",
}

#: An op far below its roof: measure what it can reach here. ``{command}`` is the opscope repro command line that
#: reproduces it (the trace, the op), ``{variants}`` the variants that fit its dtype, layout and bound.
ROOFLINE = {
    "pytorch": ("reproduce it alone with its exact inputs and time its variants on this device: {command} --variants "
                "{variants}; keep the fastest whose outputs stay within tolerance (channels_last: "
                "model.to(memory_format=torch.channels_last); tf32: torch.backends.cuda.matmul.allow_tf32 = True; "
                "autocast: torch.autocast('cuda', dtype=...); compile: torch.compile on the module); if none comes "
                "near the roof, try shapes the kernels like better (multiples of 64 or 128) or a larger batch"),
    "tensorflow": ("reproduce it as its PyTorch equivalent on this device: {command} --as torch --variants {variants} "
                   "(how fast another kernel runs these shapes here); in TensorFlow try XLA "
                   "(tf.function(jit_compile=True)) and mixed precision (tf.keras.mixed_precision)"),
    "jax": ("time it alone with its shapes (a jax.jit of the op) against bf16 inputs, other layouts and shapes the "
            "kernels like better (multiples of 64 or 128)"),
    "onnxruntime": ("time the node alone with its shapes (a one-node ONNX model, onnxruntime_perf_test) against other "
                    "execution providers or their options (TensorRT, cudnn_conv_algo_search=EXHAUSTIVE) and fp16"),
    "migraphx": ("tune its kernels (migraphx-driver compile --exhaustive-tune) and compare fp16/int8 quantization and "
                 "layouts"),
    None: ("reproduce it alone with its exact inputs and time its variants on this device: {command} --variants "
           "{variants} (a PyTorch trace; a TensorFlow one with --as torch); keep the fastest whose outputs stay within "
           "tolerance"),
}

#: A warm-up step in the profiled window: profile the steady state.
WARM_UP = {
    "pytorch": ("measure the steady state only: torch.profiler.schedule(wait=1, warmup=1, active=3) (opscope record "
                "does this), and leave the first step out of averages and comparisons (opscope steps shows the "
                "flags; opscope diff --steps picks the steps compared); compile and autotune before timing: run a "
                "few warm-up iterations after torch.compile and with torch.backends.cudnn.benchmark=True (set once, "
                "with fixed input shapes)"),
    "tensorflow": ("profile later steps (TensorBoard(profile_batch=(10, 15)) or tf.profiler.experimental.start after "
                   "a few steps: the first runs trace and compile the tf.function), and leave the first step out of "
                   "averages and comparisons (opscope diff --steps)"),
    "jax": ("profile after a few steps (jax.profiler.start_trace once the jitted step has compiled), and leave the "
            "first step out of averages and comparisons (opscope diff --steps)"),
    "onnxruntime": ("run a few inferences before profiling (session creation and the first run() allocate and tune), "
                    "and leave the first run out of averages and comparisons (opscope diff --steps)"),
    "migraphx": ("time after warm-up runs (the first run allocates and loads kernels), and leave it out of averages "
                 "and comparisons"),
    None: ("profile the steady state (after a few warm-up steps), and leave the first step out of averages and "
           "comparisons (opscope diff --steps picks the steps compared)"),
}

#: Steps much slower than the others, recurring or not: what differs in them.
SLOW_STEPS = {
    "pytorch": ("look at what the slow steps do differently (the ops listed; opscope ops --steps N against a typical "
                "step): periodic checkpointing, logging or evaluation, garbage collection (gc.freeze() after setup), "
                "recompiles on new shapes (TORCH_LOGS=recompiles; mark_dynamic or pad to a few shapes), allocator "
                "retries (see the memory finding)"),
    "tensorflow": ("look at what the slow steps do differently (the ops listed; opscope ops --steps N): periodic "
                   "checkpointing, logging or evaluation, retracing of a tf.function on new shapes (give it an "
                   "input_signature or pad to a few shapes)"),
    "jax": ("look at what the slow steps do differently (the ops listed; opscope ops --steps N): periodic "
            "checkpointing, logging or evaluation, recompiles of a jitted function on new shapes "
            "(jax.log_compiles; pad to a few shapes)"),
    "onnxruntime": ("look at what the slow runs do differently (the nodes listed; opscope ops --steps N): new input "
                    "shapes (memory pattern and kernel choice redone per shape), other work on the machine"),
    "migraphx": "look at what the slow runs do differently (the instructions listed; opscope ops --steps N)",
    None: ("look at what the slow steps do differently (the ops listed; opscope ops --steps N against a typical "
           "step): periodic checkpointing, logging or evaluation, recompiles on new shapes, other work on the host"),
}


def framework(trace: Trace) -> str | None:
    """The framework a remedy is written for (``None``: not known); a JAX program's xplane says JAX."""
    if str(trace.metadata.get("tool") or "").lower() == "jax" or "jax_version" in trace.metadata:
        return "jax"
    found = framework_of(trace.metadata)
    return found if found in LAUNCH_BOUND else None


def remedy(table: dict[str | None, str], trace: Trace) -> str:
    """The remedy of ``table`` for the trace's framework."""
    return table[framework(trace)]
