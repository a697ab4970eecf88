"""The training program that ``tools/gpu-check`` records with ``opscope record`` and re-runs with changes applied.

    python gpu_check_program.py [--steps 20] [--device auto|cpu|cuda] [--threads N]
                                [--no-item] [--pin] [--tf32] [--times FILE] [--key-averages FILE]

A small convolutional net (fp32, cuDNN at torch's defaults) whose features join a sequence of token vectors, a
token-wise MLP in fp32 (its matmuls are what TF32 speeds up: torch leaves TF32 off for matmuls unless ``--tf32``) and
a transformer encoder block under autocast on a GPU (bf16 where the device runs it, else fp16, without loss scaling,
whose inf checks would add synchronisations of their own; fp32 on the CPU), fed by a ``DataLoader`` with
``num_workers=0`` whose batches are pageable host memory copied to the device each step. Inside
``record_function("log_loss")`` every step calls ``loss.item()``: a deliberate host-device synchronisation.

The sizes are a GPU's (several ms per step on an H100) or, on the CPU, a few times smaller in every dimension.

The changes ``tools/gpu-check`` measures against opscope's predictions:

- ``--no-item``: the ``.item()`` inside ``log_loss`` is not made (the region stays, empty);
- ``--pin``: ``DataLoader(pin_memory=True)`` and ``.to(device, non_blocking=True)``;
- ``--tf32``: TF32 for fp32 matmuls (``torch.backends.cuda.matmul.allow_tf32``).

``--times FILE`` writes each step's wall time (from one ``optimizer.step()`` return to the next, as ``opscope
record`` times steps; the host does not wait for the device at a step's end) and the synchronised wall time of the
steps after the third. ``--key-averages FILE``: under ``opscope record``, torch's own ``key_averages()`` of the
recorded window (the same profiler run that wrote the trace), per op: calls, CPU and device totals in microseconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

#: The region whose ``.item()`` is the deliberate synchronisation (``whatif sync:log_loss=0``).
REGION = "log_loss"
#: (batch, channels, image side, model width, tokens) on a GPU and on the CPU
GPU_SIZES = (64, 64, 64, 512, 128)
CPU_SIZES = (8, 16, 16, 64, 16)
#: Distinct samples the dataset cycles through (the batches are built from them, in Python, each step).
POOL = 256


class Samples(Dataset):
    """``length`` samples drawn from a fixed pool: an image, a sequence of token vectors and a label."""

    def __init__(self, length: int, side: int, tokens: int, width: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.length = length
        self.images = torch.randn(POOL, 3, side, side, generator=g)
        self.tokens = torch.randn(POOL, tokens, width, generator=g)
        self.labels = torch.randint(0, 10, (POOL,), generator=g)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        j = i % POOL
        return self.images[j], self.tokens[j], self.labels[j]


class Net(nn.Module):
    """Convolutions give a feature vector that is added to the tokens; a token-wise MLP in fp32; a transformer block
    under autocast; a classifier on the mean token."""

    def __init__(self, channels: int, width: int, amp: torch.dtype | None, device_type: str) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(channels * 16, width))
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.block = nn.TransformerEncoderLayer(width, 8 if width >= 256 else 4, 4 * width, dropout=0.0,
                                                batch_first=True)
        self.head = nn.Linear(width, 10)
        self.amp, self.device_type = amp, device_type

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens + self.conv(images)[:, None, :]
        tokens = tokens + self.mlp(tokens)
        with torch.autocast(self.device_type, dtype=self.amp or torch.float32, enabled=self.amp is not None):
            hidden = self.block(tokens)
        return self.head(hidden.float().mean(1))


def amp_dtype(device: torch.device) -> torch.dtype | None:
    """Autocast's dtype on a GPU: bf16 where it runs it, else fp16. None (fp32) on the CPU: the dry run stays small
    and in fp32, which every CPU runs fast."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return None


def key_averages(path: Path) -> bool:
    """Write the recording's ``key_averages()`` to ``path``; False when no profiler ran in this process."""
    try:
        from opscope.capture import session
    except ImportError:
        return False
    recording = session._active[-1] if session._active else None
    prof = getattr(recording, "_prof", None)
    if prof is None or getattr(prof, "profiler", None) is None:
        return False  # not under opscope record (a re-run), or nothing was collected
    rows: list[dict[str, Any]] = []
    for e in prof.key_averages():
        device = getattr(e, "device_time_total", None)
        self_device = getattr(e, "self_device_time_total", None)
        if device is None:  # torch before 2.4 named them cuda_*
            device, self_device = getattr(e, "cuda_time_total", 0), getattr(e, "self_cuda_time_total", 0)
        rows.append({"name": e.key, "count": e.count, "device_type": str(getattr(e, "device_type", "")),
                     "is_user_annotation": bool(getattr(e, "is_user_annotation", False)),
                     "cpu_time_total_us": e.cpu_time_total, "self_cpu_time_total_us": e.self_cpu_time_total,
                     "device_time_total_us": device or 0, "self_device_time_total_us": self_device or 0})
    path.write_text(json.dumps({"torch": torch.__version__, "steps": getattr(prof, "step_num", None),
                                "ops": rows}))
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (CPU runs)")
    parser.add_argument("--no-item", action="store_true", help=f"no .item() inside record_function({REGION!r})")
    parser.add_argument("--pin", action="store_true", help="pinned batches, non_blocking copies")
    parser.add_argument("--tf32", action="store_true", help="TF32 for fp32 matmuls")
    parser.add_argument("--times", type=Path, help="write the step times (JSON) here")
    parser.add_argument("--key-averages", type=Path, help="write key_averages() of the recorded window here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    gpu = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = args.tf32  # cuDNN's own TF32 switch stays at torch's default
    torch.manual_seed(0)
    batch, channels, side, width, tokens = GPU_SIZES if gpu else CPU_SIZES
    amp = amp_dtype(device)
    pin = args.pin and gpu
    loader = DataLoader(Samples(batch * args.steps, side, tokens, width), batch_size=batch, num_workers=0,
                        pin_memory=pin)
    model = Net(channels, width, amp, device.type).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses: list[float] = []
    times: list[float] = []
    last = time.perf_counter()
    steady_from: float | None = None
    for images, toks, labels in loader:
        images = images.to(device, non_blocking=pin)
        toks = toks.to(device, non_blocking=pin)
        labels = labels.to(device, non_blocking=pin)
        loss = nn.functional.cross_entropy(model(images, toks), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        with torch.profiler.record_function(REGION):
            if not args.no_item:
                losses.append(loss.item())
        opt.step()
        now = time.perf_counter()
        times.append(now - last)
        last = now
        if len(times) == 3:
            steady_from = now
    if gpu:
        torch.cuda.synchronize()
    end = time.perf_counter()
    if args.key_averages is not None and not key_averages(args.key_averages):
        print("gpu-check program: no profiler in this process: key_averages() not written", file=sys.stderr)
    if args.times is not None:
        synced = (end - steady_from) / (len(times) - 3) if steady_from is not None and len(times) > 3 else None
        args.times.write_text(json.dumps({"step_s": times, "synced_step_s": synced, "device": str(device),
                                          "amp": str(amp), "no_item": args.no_item, "pin": pin, "tf32": args.tf32}))
    print(f"gpu-check program: {len(times)} steps on {device} (autocast {amp}), last loss "
          f"{losses[-1] if losses else float(loss.detach()):.4f}")


if __name__ == "__main__":
    main()
