"""`opscope peaks`: the achievable matmul FLOP/s and copy bandwidth of this machine's device, measured; a peaks
file for the roofline of traces recorded here."""

from pathlib import Path
from typing import Annotated

import typer

from opscope.cli.app import app
from opscope.cli.common import say, show
from opscope.cli.options import ForceOpt, FormatOpt
from opscope.errors import UsageError


@app.command()
def peaks(
    device: Annotated[str | None, typer.Option(
        "--device", metavar="cpu|cuda", help="The device to measure: cpu, or cuda (an NVIDIA or AMD GPU through "
                                             "torch's CUDA/ROCm). Default: cuda where torch sees a GPU, else cpu.",
        show_default=False)] = None,
    seconds: Annotated[float, typer.Option("--seconds", help="About how long all the measurements take together.",
                                           min=0.05, max=600)] = 3.0,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the measured peaks to this file "
                                                "(JSON), for --peaks FILE of the commands that draw a roofline.",
                                                show_default=False)] = None,
    force: ForceOpt = False,
    format: FormatOpt = "table",
) -> None:
    """Measure the device's achievable peaks: matmul TFLOP/s per data type and copy bandwidth.

    A matmul of two n x n matrices (fp32 always; fp16 and bf16 where the device runs them; numpy without
    torch: fp32 and fp64) and a copy of a large buffer (bytes read + written per second) each run for
    their share of --seconds: a warm-up, then 5 repetitions; the result is the median, with the lowest
    and highest. Uses torch when installed (CPU, or a CUDA/ROCm GPU), else numpy on the CPU. On a GPU
    the fp32 matmul runs without TF32. These are what this machine achieves, lower than the datasheet
    peaks that opscope uses for the devices it knows; -o writes them as a peaks file, which --peaks FILE
    reads for traces recorded on this machine.
    """
    from opscope.capture.device_peaks import measure
    from opscope.capture.reports import peaks_report

    if device is not None and device not in ("cpu", "cuda"):
        raise UsageError(f"--device takes cpu or cuda, not {device!r}")
    if output is not None:
        from opscope.outfile import check_target

        check_target(output, force)
    measurement = measure(device, seconds)
    show(peaks_report(measurement), format)
    if output is not None:
        import json

        from opscope.outfile import write_file

        document = json.dumps(measurement.peaks().to_json(), indent=1).encode() + b"\n"
        write_file(output, lambda stream: stream.write(document), force)
        say(f"wrote {output} (give it to --peaks)")
