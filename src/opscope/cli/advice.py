"""`opscope advise` (ranked findings with estimated savings) and `opscope diff` (two runs, per step; a CI gate)."""

from pathlib import Path
from typing import Annotated, Any

import typer

from opscope.cli.app import app
from opscope.cli.common import announce, load, open_quietly, say, show, split
from opscope.cli.options import CaptureOpt, FormatOpt, LimitOpt, NoCacheOpt, StepsOpt
from opscope.errors import TraceError, UsageError
from opscope.scale.discover import is_job_spec

AdviseTracesArg = Annotated[list[Path] | None, typer.Argument(
    help="Trace file, or a recording directory from `opscope record`; or a job: a directory or glob of rank "
         "traces, or several rank traces (read in parallel as opscope job does: stragglers for the "
         "communication rule).", show_default=False)]
ExplainOpt = Annotated[str | None, typer.Option("--explain", help="Say how rule RULE decides and estimates its "
                                                                  "saving, then exit ('all' for every rule).",
                                                metavar="RULE")]
RulesOpt = Annotated[str | None, typer.Option("--rules", help="Run only these rules, comma-separated.")]
RunInfoOpt = Annotated[Path | None, typer.Option("--run", help="The recording's run.json (thread settings, cores, "
                                                               "GPUs); found beside the trace when not given.")]
MeasureOpt = Annotated[bool, typer.Option(
    "--measure", help="Measure instead of assuming: the dominant-op rule's alternatives (channels_last, "
                      "TF32/autocast) with reproducers of the trace's ops (opscope repro); and, on a recording of "
                      "opscope record, the findings whose change opscope can apply without editing the program "
                      "(DataLoader workers, pinned batches, thread counts, --measure-region), by re-running the "
                      "recorded program with it: predicted against re-run step time. Needs PyTorch, and the "
                      "trace's device. Re-runs the program's command from run.json.")]
MeasureRegionOpt = Annotated[str | None, typer.Option(
    "--measure-region", metavar="NAME",
    help="With --measure: re-run a host-sync finding with the synchronize() calls inside record_function regions "
         "named NAME skipped (predicted with whatif's sync:NAME=0).")]
RerunsOpt = Annotated[int, typer.Option("--reruns", help="With --measure on a recording: runs of the program per "
                                                         "finding (their steady-state steps pooled).", min=1, max=20)]
MeasureDirOpt = Annotated[Path, typer.Option("--measure-dir", help="With --measure: a new directory for the "
                                                                    "reproducers it runs.")]
MeasureBudgetOpt = Annotated[float, typer.Option("--budget", help="With --measure: seconds of timed runs per case "
                                                                  "and variant.", min=0.01)]


@app.command()
def advise(traces: AdviseTracesArg = None, explain: ExplainOpt = None, rules: RulesOpt = None,
           run_info: RunInfoOpt = None, measure: MeasureOpt = False,
           measure_dir: MeasureDirOpt = Path("opscope-measure"), budget: MeasureBudgetOpt = 0.5,
           measure_region: MeasureRegionOpt = None, reruns: RerunsOpt = 2, format: FormatOpt = "table",
           limit: LimitOpt = 0, no_cache: NoCacheOpt = False,
           capture: CaptureOpt = None) -> None:
    """Findings ranked by estimated saving: what slows each step, the evidence, and a change to try.

    Every rule looks at the analyses of the trace (GPU idle time by cause, ops, kernels, launches, copies,
    synchronisation, communication, steps, memory, thread settings) and reports a finding with its evidence
    rows, the time it would save per step (and as a share of the mean step) with the reasoning behind that
    figure, and a concrete change. Savings of different findings can overlap (the GPU-idle finding is an upper
    bound that the cause-specific ones split), so do not add them up. `--explain RULE` tells how a rule
    decides and estimates. JSON gives the findings with their evidence; CSV one line per finding.

    --measure replaces the dominant-op rule's assumed speed-ups (2x for a faster depthwise backward, 1.25x for
    channels_last convolutions, 2x for tensor cores) by speed-ups measured here: it writes reproducers of the
    biggest cases the finding covers (opscope repro), runs each with the variant that stands for the change, and
    uses the time-weighted speed-up of those whose outputs stayed within tolerance; the finding says which.

    --measure on a recording (its directory, or a trace with run.json beside it) also re-runs the recorded program
    (its command, working directory and performance environment from run.json; step times only, no profiler) once
    per finding whose change opscope's runner can apply without editing it: DataLoader num_workers (the
    input-pipeline rule's N), pin_memory=True for a DataLoader's batches (pageable copies), the threads rule's
    intra-op thread count, and, with --measure-region NAME, no synchronize() inside record_function(NAME) (a
    host-sync finding). The finding then says "predicted X/step, re-run Y/step (p10-p90), within Z%" and its
    saving is measured: the recording's unrecorded steps less the re-run's steady-state steps (warm-up steps left
    out; with N workers, means of N consecutive steps). JSON: the finding's "measured" object.
    """
    from opscope.advise import advise as run_rules
    from opscope.advise import all_rules, rule
    from opscope.advise.report import advice_report, explain_report

    if explain is not None:
        show(explain_report(all_rules() if explain == "all" else [rule(explain)]), "table")
        return
    first, run, job = _advise_inputs(traces, run_info, no_cache)
    t = load(first, no_cache, inflation_note=False)
    if measure_region is not None and not measure:
        raise UsageError("--measure-region goes with --measure")
    measured = _measure(t, first, measure_dir, budget) if measure else None
    result = run_rules(t, run=run, only=split(rules) if rules else None, measured=measured, job=job)
    if measure and run is not None and run.get("command"):
        result = _rerun(result, t, run, reruns, measure_region)
    elif measure:
        say("--measure: no run.json naming the program (a recording of opscope record): no finding is re-run")
    show(advice_report(result, str(first), limit), format)


def _rerun(result: Any, trace: Any, run: dict[str, Any], reruns: int, region: str | None) -> Any:
    """The advice with the findings opscope can apply re-run on the recorded program (capture.rerun)."""
    from dataclasses import replace

    from opscope.advise.finding import ranked
    from opscope.capture.rerun import measure_findings

    findings, notes = measure_findings(result.findings, trace, run, runs=reruns, region=region, progress=say)
    for note in notes:
        say(note)
    return replace(result, findings=ranked(findings))


def _advise_inputs(traces: list[Path] | None, run_info: Path | None, no_cache: bool) -> tuple[Path, Any, Any]:
    """The trace the rules read, its run.json (given, beside the trace, or the recording directory's) and, when
    several ranks are given, the job view."""
    from opscope.advise.context import find_run_info

    if not traces:
        raise UsageError("give a trace to advise on (or --explain RULE); see opscope advise --help")
    first, *others = traces
    job = None
    if others or is_job_spec(first):
        first, job = _job(traces, no_cache)
    run = None
    if first.is_dir():
        first, run = recording_trace(first)
    elif run_info is None:
        run = find_run_info(first)
    if run_info is not None:
        run = _read_run_info(run_info)
    return first, run, job


def _job(traces: list[Path], no_cache: bool) -> tuple[Path, Any]:
    """Several ranks: the job view (every rank summarised in parallel, see opscope job) and the trace the
    single-trace rules read: the lowest rank's."""
    from opscope.cli.job import run_job_from_env

    run = run_job_from_env(traces, use_cache=not no_cache)
    for line in run.problems:
        say(line)
    if not run.summaries:
        raise UsageError(f"{', '.join(map(str, traces))}: no rank could be read")
    lowest = min(run.summaries)
    say(f"single-trace findings are rank {lowest}'s ({run.summaries[lowest].path}); the straggler finding covers "
        f"all {len(run.summaries)} ranks")
    return Path(run.summaries[lowest].path), run.view


def _measure(trace: Any, path: Path, directory: Path, budget: float) -> dict[str, Any]:
    from opscope.repro.measure import measure
    from opscope.repro.registry import cuda_available

    result = measure(trace, str(path), directory, budget=budget, cuda_here=cuda_available(), progress=say)
    for note in result.notes:
        say(note)
    for alt_id, factor in result.factors.items():
        say(f"--measure: {alt_id}: {factor.factor:g}x measured ({factor.command})")
    return dict(result.factors)


def _read_run_info(path: Path) -> Any:
    import json

    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TraceError(path, f"cannot read run info ({exc.__class__.__name__})",
                         "give the run.json that opscope record wrote") from None


def open_pair(base: Path, new: Path, no_cache: bool,
              hint: str = "give two different traces (a baseline and a new run)") -> tuple[Any, Any]:
    """The two traces of a comparison, checked to be comparable; both open before either says anything (a
    warning about the first and the second's error would be two lines)."""
    from opscope.diff import check_inputs

    if base.exists() and new.exists() and base.samefile(new):
        raise TraceError(new, f"is the same file as {base}; nothing to compare", hint)
    a, b = open_quietly(base, no_cache), open_quietly(new, no_cache)
    check_inputs(base, new, a, b)
    announce(a, base)
    announce(b, new)
    return a, b


def recording_trace(directory: Path) -> tuple[Path, Any]:
    """The first trace of a recording directory, and its run.json."""
    import json

    from opscope.analyses.recording import clean_run, recording_traces

    run_file = directory / "run.json"
    try:
        run = json.loads(run_file.read_text())
    except (OSError, ValueError):
        raise TraceError(directory, "is a directory without a readable run.json",
                         "give a trace file or a directory written by opscope record") from None
    names, note = recording_traces(directory, run)  # plain file names only: never a path elsewhere
    if note:
        say(note)
    if not names:
        raise TraceError(directory, "the recording holds no trace", "see its run.json for what happened")
    return directory / names[0], clean_run(run)


DiffBaseArg = Annotated[Path, typer.Argument(help="The baseline: a trace file, or a recording directory from "
                                                  "`opscope record` (its first trace).", show_default=False)]
DiffNewArg = Annotated[Path, typer.Argument(help="The trace (or recording directory) to compare with it.",
                                            show_default=False)]
ByOpt = Annotated[str, typer.Option(help="Match ops by: name, name,shapes (name and input shapes) or api (the "
                                         "Python API, across frameworks: aten::conv2d and TF's Conv2D meet as "
                                         "conv2d).")]
WholeTraceOpt = Annotated[bool, typer.Option("--whole-trace", help="Compare whole-trace totals, not per step.")]
FailIfSlowerOpt = Annotated[str | None, typer.Option(
    "--fail-if-slower", help="CI gate: exit 1 when the step time grew by more than this beyond the noise (the whole "
                             "95% interval of its median difference above it): 5% (of the base median) or a time "
                             "such as 2ms. Too few steps to tell, or an interval across the limit: a warning, exit "
                             "0 (3 with --strict).", metavar="LIMIT")]
StrictOpt = Annotated[bool, typer.Option(
    "--strict", help="With --fail-if-slower: exit 3 when the steps cannot tell (too few, or an interval across the "
                     "limit) instead of 0.")]
OnlyOpt = Annotated[str | None, typer.Option("--only", help="Only 'ops' or only 'kernels' rows.")]
DiffTableOpt = Annotated[str | None, typer.Option(
    "--table", help="Which table JSON/CSV write (and the only one the terminal shows): rows (ops and kernels "
                    "matched by name; the default), headline (the step time and its parts), ops (device time by "
                    "op), classes (device time by kernel "
                    "class), kernel-choice, critical-path (each side's mean critical path per step, by "
                    "category) or roofline (per op, shapes and dtype, each side's share of its own device's roof).",
    metavar="TABLE")]
BasePeaksOpt = Annotated[Path | None, typer.Option(
    "--base-peaks", metavar="FILE", help="With --table roofline: BASE's device peaks from this file (opscope peaks "
                                         "--output writes one) instead of the table's for the device BASE names.")]
NewPeaksOpt = Annotated[Path | None, typer.Option(
    "--new-peaks", metavar="FILE", help="With --table roofline: NEW's device peaks from this file.")]
OpLevelOpt = Annotated[str, typer.Option(
    "--op-level", help="Device time by op: charge each kernel to the outermost op above it with a Python API "
                       "(api: aten::linear, aten::conv2d, the same on every vendor) or to the op that launched "
                       "it (launching: aten::addmm, aten::cudnn_convolution).")]
DiffFullNamesOpt = Annotated[bool, typer.Option("--full-names", help="Table: kernel names in full (JSON/CSV always "
                                                                     "have them as the trace writes them).")]


@app.command()
def diff(base: DiffBaseArg, new: DiffNewArg, by: ByOpt = "name", steps: StepsOpt = None,
         whole_trace: WholeTraceOpt = False, fail_if_slower: FailIfSlowerOpt = None, only: OnlyOpt = None,
         table: DiffTableOpt = None, op_level: OpLevelOpt = "api", full_names: DiffFullNamesOpt = False,
         base_peaks: BasePeaksOpt = None, new_peaks: NewPeaksOpt = None, format: FormatOpt = "table",
         limit: LimitOpt = 20, no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
         strict: StrictOpt = False) -> None:
    """Compare two traces (two devices, versions or frameworks): what got slower, per step.

    BASE and NEW are trace files or recording directories of `opscope record` (their first trace, as advise
    takes them).

    Both traces are normalised to one step: when both have ProfilerStep#N annotations, every time is the total
    over the compared steps (all of them, as every command's mean step; or --steps) divided by
    their number, and calls are per step too; when neither has steps, whole-trace totals are compared. Rows:
    host ops (kind op, self time) and device work (kind kernel: kernels, copies, memsets, collectives), matched
    by name (see --by), sorted by absolute change; status is changed, same, added (only in NEW) or removed
    (only in BASE). The table also shows where the difference comes from (step time split into device compute,
    memcpy, memset, comm and idle; on CPU-only traces dataloader: time in the DataLoader's spans, ops inside
    included; host_ops: other ops; outside_ops: the rest, Python and waiting) and kernel choice changes: the
    same op with the same input shapes running different kernels. --format json gives the rows as an array of
    objects (kind, name, base_ns, new_ns, delta_ns, calls_base, calls_new, status, median_delta_ns, ci_low,
    ci_high, ci_low_pct, ci_high_pct); --table headline the headline's rows (part, base_ns, new_ns, delta_ns and
    the same interval columns).

    Run-to-run noise: every row and the headline carry the median difference per step (Hodges-Lehmann: the median
    of all new - base differences between steps) and its 95% interval (distribution-free, from the Mann-Whitney U
    distribution), over each side's steps one by one: ci_low/ci_high in ns, ci_low_pct/ci_high_pct in % of the
    base median; the table shows it as ci_95 and says "within noise" when it holds 0. A side needs 5 steps for an
    interval. The step time's samples are the steps opscope record's runner timed without the profiler (run.json)
    where both sides have 5 or more and every step is compared, else the recorded steps; a note says which.

    --fail-if-slower judges that interval of the step time: it fails only when all of it lies beyond the limit,
    passes when all of it lies within, and otherwise (fewer than 5 steps a side, no steps at all, or an interval
    across the limit) says "not enough steps to tell" on stderr. It always prints the interval it judged; a
    failure names the part that grew most, then the biggest rows.

    Across vendors (an H100 against an MI300), where kernel names differ, two more tables compare what the
    kernels did. ops: the device time per step of the kernels, copies, memsets and collectives each op launched
    (op, shapes, class, matched_by, base_ns, new_ns, delta_ns, calls_base, calls_new), matched first by op and
    input shapes, then by op alone; matched_by says which (op+shapes, op, unmatched), and the notes give the
    share of each trace's device time matched each way. classes: device time per kernel class (gemm, conv,
    attention, elementwise, reduction_norm, softmax, comm, memcpy, memset, other: from the kernel name, else the
    launching op) with each class's share of its trace's device time. --table picks the table JSON/CSV write.

    --table roofline: per op, input shapes and dtype (as opscope roofline, each trace whole), each side's calls,
    device time, achieved TFLOP/s (GB/s for copies), pct_of_roof and bound under its own device's roofs (the
    device each trace names; --base-peaks/--new-peaks FILE give a side other peaks), the ratio of device time per
    call (new/base) and the change of pct_of_roof; a row on one side only has the other side's columns null.

    Exit codes: 0 compared (and within --fail-if-slower, or the steps cannot tell without --strict), 1 slower
    than --fail-if-slower allows, 2 no comparison possible (unreadable or empty trace, the same file twice, traces
    of different frameworks without --by api, steps in one trace only without --whole-trace), 3 with --strict:
    --fail-if-slower could not tell (too few steps, or an interval across the limit).
    """
    from opscope.diff import compare
    from opscope.diff.report import comparison_report

    threshold = _diff_checks(fail_if_slower, only, table, op_level)
    if strict and threshold is None:
        raise UsageError("--strict goes with --fail-if-slower")
    if (base_peaks is not None or new_peaks is not None) and table != "roofline":
        raise UsageError("--base-peaks and --new-peaks go with --table roofline")
    for peaks_file in (base_peaks, new_peaks):  # a bad peaks file is one line before the traces are read
        if peaks_file is not None:
            from opscope.analyses.peaks import read_peaks_file

            read_peaks_file(peaks_file)
    # recording directories as advise takes them: their run.json names the trace (and times the steps)
    (base, run_base), (new, run_new) = (_trace_and_run(p) for p in (base, new))
    a, b = open_pair(base, new, no_cache)
    result = compare(a, b, by=by, steps=steps, whole_trace=whole_trace, labels=(str(base), str(new)),
                     ops=only != "kernels", kernels=only != "ops", op_level=op_level,
                     roofline_peaks=(base_peaks, new_peaks), runs=(run_base, run_new))
    show(comparison_report(result, full_names, limit, table=table), format)
    if threshold is not None:
        found = result.gate(threshold)
        say(("warning: " if found.unsure else "") + found.line)
        if found.failed:
            raise typer.Exit(1)
        if found.unsure and strict:
            raise typer.Exit(3)


def _trace_and_run(path: Path) -> tuple[Path, Any]:
    """The trace to read for a diff argument and its recording's run.json (None when it has none): a recording
    directory's first trace, or a trace file with the run.json that lists it beside it."""
    if path.is_dir():
        return recording_trace(path)
    from opscope.analyses.recording import find_run_info

    return path, find_run_info(path)


def _diff_checks(fail_if_slower: str | None, only: str | None, table: str | None, op_level: str) -> Any:
    """diff's option values checked (one line when one is wrong); the --fail-if-slower threshold, or None."""
    from opscope.analyses.op_device import OP_LEVELS
    from opscope.diff.gate import parse_threshold
    from opscope.diff.report import TABLES

    threshold = parse_threshold(fail_if_slower) if fail_if_slower is not None else None
    if only not in (None, "ops", "kernels"):
        raise UsageError(f"--only takes ops or kernels, not {only!r}")
    if table is not None and table not in TABLES:
        raise UsageError(f"--table takes {', '.join(TABLES)}, not {table!r}")
    if op_level not in OP_LEVELS:
        raise UsageError(f"--op-level takes {', '.join(OP_LEVELS)}, not {op_level!r}")
    return threshold
