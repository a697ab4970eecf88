"""opscope diff on a hand-built pair: per-step rows, headline, GPU against CPU runs, and the CI gate's thresholds."""

from __future__ import annotations

from support.diff import loader_events
from support.tracefiles import small_gpu_trace, write_trace, x

from opscope.analyses.gpu import GpuAnalysis
from opscope.diff import compare
from opscope.diff.gate import Threshold, parse_threshold, verdict
from opscope.diff.samples import StepSample
from opscope.ingest import open_trace

US = 1000


def test_rows_are_per_step_sorted_by_absolute_change(pair):
    c = compare(open_trace(pair[0]), open_trace(pair[1]))
    rows = {(r["kind"], r["name"]): r for r in c.rows.to_pylist()}
    # two steps a side: too few for an interval
    assert rows[("kernel", "k_mm")] == {"kind": "kernel", "name": "k_mm", "base_ns": 200_000, "new_ns": 300_000,
                                        "delta_ns": 100_000, "calls_base": 1.0, "calls_new": 1.0,
                                        "status": "changed", "median_delta_ns": None, "ci_low": None,
                                        "ci_high": None, "ci_low_pct": None, "ci_high_pct": None}
    assert rows[("op", "aten::mm")]["delta_ns"] == 50_000
    # 50 us in one of two steps, less its 2 us launch call (a child): 24 us and half a call per step
    relu = rows[("op", "aten::relu")]
    assert (relu["base_ns"], relu["new_ns"], relu["calls_base"], relu["status"]) == (24_000, 0, 0.5, "removed")
    assert rows[("kernel", "k_relu")]["base_ns"] == 15_000
    add = rows[("op", "aten::add")]
    assert (add["base_ns"], add["new_ns"], add["status"]) == (0, 18_000, "added")  # 20 us less its launch
    deltas = [abs(r["delta_ns"]) for r in c.rows.to_pylist()]
    assert deltas == sorted(deltas, reverse=True) and c.rows["name"][0].as_py() == "k_mm"


def test_headline_splits_the_step_time(pair):
    c = compare(open_trace(pair[0]), open_trace(pair[1]))
    head = {r["part"]: r for r in c.headline}
    assert (head["step"]["base_ns"], head["step"]["new_ns"]) == (1_000_000, 1_200_000)
    # device compute per step: base (200 + 200 + 30) / 2 = 215 us; new 300 + 10 = 310 us
    assert (head["compute"]["base_ns"], head["compute"]["new_ns"]) == (215_000, 310_000)
    assert head["idle"]["base_ns"] == 1_000_000 - 215_000 and head["idle"]["new_ns"] == 1_200_000 - 310_000
    assert c.summary.startswith("new is 20.0% slower per step")


def test_gpu_run_against_a_cpu_run_shares_the_host_parts(tmp_path, pair):
    # the CPU run: two steps of 900 us, per step aten::mm 400 us with aten::relu 100 us after it
    cpu = []
    for i, s in enumerate((0, 900)):
        cpu += [x(f"ProfilerStep#{i + 1}", s, 900, cat="user_annotation"), x("aten::mm", s + 10, 400),
                x("aten::relu", s + 500, 100)]
    cpu_path = write_trace(tmp_path / "cpu.json", cpu)
    c = compare(open_trace(pair[0]), open_trace(cpu_path), labels=("GPU", "CPU"))
    head = {r["part"]: r for r in c.headline}
    # base host ops per step: step 1 mm 10-110 and relu 300-350 (150 us), step 2 mm 100 us -> 125 us
    assert (head["host_ops"]["base_ns"], head["host_ops"]["new_ns"]) == (125_000, 500_000)
    assert (head["outside_ops"]["base_ns"], head["outside_ops"]["new_ns"]) == (875_000, 400_000)
    assert head["compute"]["new_ns"] == 0 and head["compute"]["base_ns"] == 215_000
    assert c.notes[0].startswith("only GPU has device activity") and "CPU" in c.notes[0]
    # two GPU runs: no host parts, no such note
    both = compare(open_trace(pair[0]), open_trace(pair[1]))
    assert "host_ops" not in {r["part"] for r in both.headline} and not both.notes[0].startswith("only")


def test_threshold_parsing_and_verdict():
    assert parse_threshold("5%") == Threshold(relative=0.05) == parse_threshold("5")
    assert parse_threshold("2ms") == Threshold(absolute_ns=2_000_000)
    assert parse_threshold("1.5s") == Threshold(absolute_ns=1_500_000_000)


def _steps(*values):
    return StepSample(tuple(values), "recorded")


def test_the_gate_judges_the_whole_interval():
    """Five steps a side: the interval is the 3rd smallest to the 3rd largest of the 25 pairwise differences
    (tests/unit/test_noise.py). Base 1000..1040 ns by 10 (median 1020): the differences of new = base + 100 are
    100 + 10 x (j - i), 60 once, 70 twice, ..., 140 once: the interval is [70, 130] ns (+6.86%..+12.75%); with
    + 45, [15, 75] (+1.47%..+7.35%), across a 5% limit."""
    base = _steps(1000, 1010, 1020, 1030, 1040)
    later = _steps(*(v + 100 for v in base.values))
    slower = verdict(base, later, Threshold(relative=0.05))
    assert slower.failed and slower.line == ("regression: per-step time, 5 recorded steps each: medians 1.020 us -> "
                                             "1.120 us; median difference +9.80% (+100 ns), 95% CI +6.86% to +12.75% "
                                             "(+70 ns to +130 ns), all of it above the 5% allowed")
    within = verdict(base, later, Threshold(relative=0.13))
    assert within.outcome == "ok" and "all of it within the 13% allowed" in within.line
    across = verdict(base, _steps(*(v + 45 for v in base.values)), Threshold(relative=0.05))
    assert across.unsure and not across.failed
    assert across.line.startswith("not enough steps to tell") and "+1.47% to +7.35%" in across.line
    assert "straddles the 5% allowed" in across.line
    # a time as the limit: the interval in ns against it
    assert verdict(base, later, Threshold(absolute_ns=69)).failed
    assert verdict(base, later, Threshold(absolute_ns=130)).outcome == "ok"
    assert verdict(base, later, Threshold(absolute_ns=70)).unsure
    # faster: within any non-negative limit; the same steps again: [-30, +30] ns, within 5%, across a limit of 0
    assert verdict(base, _steps(900, 910, 920, 930, 940), Threshold(relative=0.0)).outcome == "ok"
    assert verdict(base, base, Threshold(relative=0.05)).outcome == "ok"
    assert verdict(base, base, Threshold(relative=0.0)).unsure
    # too few steps: no interval, said with the minimum
    few = verdict(_steps(1000, 1000, 1000, 1000), _steps(*[2000] * 9), Threshold(relative=0.05))
    assert few.unsure and "base 4 recorded steps, new 9" in few.line and "at least 5 steps a side" in few.line
    whole = verdict(_steps(), _steps(), Threshold(relative=0.05), unit="whole-trace")
    assert whole.unsure and "no per-step samples" in whole.line


def test_idle_is_the_device_timeline_inside_the_steps_when_work_crosses_a_step_boundary(tmp_path):
    """small_gpu_trace's relu kernel is launched in step 2 and runs [2950, 3050) us, past the last step's end
    (3000). In the new run it runs [2900, 3100). Inside the steps [0, 3000) the device is busy 200 + 60 + 50 =
    310 us (base) and 200 + 60 + 100 = 360 us (new): idle per step (3000 - busy) / 2 = 1345 and 1320 us, a
    delta of -25 us, which is what opscope gpu's idle says. Counting the launched work instead (460 us in the
    new run) would give -50 us."""
    base = write_trace(tmp_path / "base.json", small_gpu_trace())
    changed = [dict(e, ts=2900, dur=200) if e.get("name") == "relu_kernel" else e for e in small_gpu_trace()]
    new = write_trace(tmp_path / "new.json", changed)
    tb, tn = open_trace(base, use_cache=False), open_trace(new, use_cache=False)
    idle = {r["part"]: r for r in compare(tb, tn).headline}["idle"]
    assert (idle["base_ns"], idle["new_ns"], idle["delta_ns"]) == (1345 * US, 1320 * US, -25 * US)

    def gpu_idle_per_step(trace):
        device = next(r for r in GpuAnalysis(trace).breakdown().to_pylist() if r["stream"] is None)
        return device["idle_ns"] // trace.steps.num_rows

    assert idle["delta_ns"] == gpu_idle_per_step(tn) - gpu_idle_per_step(tb)


def test_cpu_headline_gives_the_dataloader_its_own_part_and_the_gate_names_it_first(tmp_path):
    # base: steps of 1000 us, DataLoader [0, 200) with aten::stack [150, 190) in it, aten::mm [300, 800)
    # new: steps of 1300 us, DataLoader [0, 700) with aten::stack [650, 690), aten::mm [720, 1250) (30 us slower)
    base = write_trace(tmp_path / "base.json", loader_events(1000, 200, 500, 300, steps=6))
    new = write_trace(tmp_path / "new.json", loader_events(1300, 700, 530, 720, steps=6))
    c = compare(open_trace(base), open_trace(new))
    head = {r["part"]: (r["base_ns"], r["new_ns"], r["delta_ns"]) for r in c.headline}
    # dataloader: the loader spans (ops inside included); host_ops: the ops outside it (aten::mm);
    # outside_ops: the rest (base 1000 - 200 - 500 = 300 us, new 1300 - 700 - 530 = 70 us)
    assert head == {"step": (1_000_000, 1_300_000, 300_000), "dataloader": (200_000, 700_000, 500_000),
                    "host_ops": (500_000, 530_000, 30_000), "outside_ops": (300_000, 70_000, -230_000)}
    # every step alike: each part's per-step samples are constant, its interval the difference itself
    ci = {r["part"]: (r["median_delta_ns"], r["ci_low"], r["ci_high"], r["ci_low_pct"]) for r in c.headline}
    assert ci["step"] == (300_000, 300_000, 300_000, 30.0)
    assert ci["dataloader"] == (500_000, 500_000, 500_000, 250.0)
    assert ci["outside_ops"] == (-230_000, -230_000, -230_000, round(-230 / 300 * 100, 2))
    verdict_ = c.gate(Threshold(relative=0.05))
    failed, reason = verdict_.failed, verdict_.line
    assert failed
    part = reason.index("biggest part: dataloader +500.000 us (host time in the DataLoader")
    assert part < reason.index("biggest rows: op aten::mm +30.000 us")
    # traces without a DataLoader keep two host parts
    plain = write_trace(tmp_path / "plain.json", [e for e in loader_events(1000, 200, 500, 300)
                                                  if "DataLoader" not in e["name"]])
    assert {r["part"] for r in compare(open_trace(plain), open_trace(plain)).headline} == \
        {"step", "host_ops", "outside_ops"}


def test_gate_names_the_biggest_part_even_when_an_op_row_leads(pair6):
    # the GPU pair per step (six steps a side): compute 215 -> 310 us (+95), idle 785 -> 890 us (+105); the
    # biggest row is kernel k_mm +100 us
    found = compare(open_trace(pair6[0]), open_trace(pair6[1])).gate(Threshold(relative=0.05))
    failed, reason = found.failed, found.line
    assert failed and "biggest part: idle +105.000 us (device time with no work" in reason
    assert "biggest rows: kernel k_mm +100.000 us" in reason
    assert reason.index("biggest part") < reason.index("biggest rows")


def test_each_side_says_what_it_ran_on_and_few_steps_are_warned_of():
    from support import make_trace, row

    from opscope.diff.headline import few_steps_note, side_description

    props = [{"id": i, "name": "NVIDIA A100-SXM4-80GB"} for i in range(8)]
    # rank 3 of 8: its kernels ran on devices 3 and 4 of the eight the trace lists
    trace = make_trace([row("kernel", "k", 0, 10, device=3, stream=7),
                        row("kernel", "k", 20, 10, device=4, stream=7)],
                       metadata={"device_properties": props, "rank": 3, "world_size": 8})
    assert side_description(trace, 12) == \
        "2x NVIDIA A100-SXM4-80GB (of 8 in the trace's device list), rank 3 of 8, 12 steps"
    cpu = make_trace([row("cpu_op", "aten::mm", 0, 10)])
    assert side_description(cpu, None) == "no device activity, the whole trace"
    assert side_description(cpu, 1) == "no device activity, 1 step"
    assert few_steps_note(("a", "b"), (12, 5)) is None
    assert few_steps_note(("a", "b"), (1, 4)).startswith("few steps compared (a 1, b 4)")


def test_hostile_device_properties_do_not_break_the_headline():
    from support import make_trace, row

    from opscope.diff.headline import side_description

    props = [{"id": [1, 2], "name": "x"}, {"id": 0, "name": ["not", "text"]}, "not a dict", {"name": "no id"}]
    trace = make_trace([row("kernel", "k", 0, 10, device=0, stream=7)], metadata={"device_properties": props,
                                                                                   "world_size": "8"})
    assert side_description(trace, 2) == \
        "device 0 (not named in the trace) (of 3 in the trace's device list), 2 steps"


def test_rows_carry_the_interval_of_their_time_in_each_step(pair6):
    """Six steps a side. k_mm takes 200 us in every base step and 300 us in every new one: [+100, +100] us, +50%.
    aten::relu's self time is 48 us (50 less its 2 us launch) in the three odd base steps, 0 in the even ones and
    in new: differences of -48 us (18 pairs) and 0 (18), so the interval [-48, 0] us holds 0."""
    base, new = open_trace(pair6[0]), open_trace(pair6[1])
    c = compare(base, new)
    rows = {(r["kind"], r["name"]): r for r in c.rows.to_pylist()}
    k_mm = rows[("kernel", "k_mm")]
    assert (k_mm["median_delta_ns"], k_mm["ci_low"], k_mm["ci_high"], k_mm["ci_low_pct"], k_mm["ci_high_pct"]) == \
        (100_000, 100_000, 100_000, 50.0, 50.0)
    relu = rows[("op", "aten::relu")]
    assert (relu["ci_low"], relu["ci_high"], relu["median_delta_ns"]) == (-48_000, 0, -24_000)
    added = rows[("op", "aten::add")]  # no base time: no share of it
    assert (added["ci_low"], added["ci_high"], added["ci_low_pct"]) == (18_000, 18_000, None)


def test_per_step_sums_add_up_to_the_rows_totals(pair6, tmp_path):
    from opscope.diff.normalize import spans
    from opscope.diff.rows import kernel_step_sums, kernel_totals, op_step_sums, op_totals

    trace = open_trace(pair6[0])
    span = spans(trace, open_trace(pair6[1]), ("a", "b"))[0]
    for by in ("name", "name,shapes", "api"):
        totals = {r["name"]: r["ns"] for r in op_totals(trace, span, by, "pytorch").to_pylist()}
        sums: dict = {}
        for r in op_step_sums(trace, span, by, "pytorch").to_pylist():
            sums[r["name"]] = sums.get(r["name"], 0) + r["ns"]
        assert {k: v for k, v in sums.items() if k in totals} == totals, by
    kernels = {r["name"]: r["ns"] for r in kernel_totals(trace, span).to_pylist()}
    per_step = kernel_step_sums(trace, span).to_pylist()
    assert {(r["name"], r["step"]) for r in per_step} >= {("k_mm", s) for s in range(1, 7)}
    assert {n: sum(r["ns"] for r in per_step if r["name"] == n) for n in kernels} == kernels


def test_parts_step_by_step_add_up_to_the_parts(pair6, tmp_path):
    from opscope.diff.headline import parts, parts_by_step
    from opscope.diff.normalize import spans

    cpu = write_trace(tmp_path / "cpu.json", loader_events(1000, 200, 500, 300, steps=5))
    for trace, device, host in ((open_trace(pair6[0]), True, False), (open_trace(pair6[0]), True, True),
                                (open_trace(cpu), False, False)):
        span = spans(trace, trace, ("a", "a"))[0]
        whole, by_step = parts(trace, span, device, host), parts_by_step(trace, span, device, host)
        assert set(by_step) == set(whole)
        assert all(len(v) == span.divisor for v in by_step.values())
        assert {k: round(sum(v) / span.divisor) for k, v in by_step.items()} == whole


def test_the_step_samples_are_the_runners_when_both_runs_have_enough(pair6):
    from opscope.diff.normalize import spans
    from opscope.diff.samples import step_samples

    base, new = open_trace(pair6[0]), open_trace(pair6[1])
    sb, sn = spans(base, new, ("a", "b"))
    # steps 1..11 timed (step n at index n - 1); the profiler ran in steps 0-4 (start-up, warm-up, 3 recorded)
    run = {"step_times_ns": [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20], "profiled_steps": [0, 1, 2, 3, 4]}
    sample_b, sample_n = step_samples(base, new, sb, sn, (run, run))
    assert sample_b.values == (14, 15, 16, 17, 18, 19, 20) and sample_b.describe() == "7 steps timed by the runner"
    # without the profiler anywhere, every step but the first after start-up
    unprofiled = dict(run, profiled_steps=[])
    assert step_samples(base, new, sb, sn, (run, unprofiled))[1].values == tuple(range(11, 21))
    # one side without enough runner-timed steps (or --steps given): both sides take their recorded steps
    short = {"step_times_ns": [10, 11, 12, 13, 14, 15, 16], "profiled_steps": [0, 1, 2, 3, 4]}
    for runs, chosen in (((run, short), False), ((run, None), False), ((run, run), True)):
        sample_b, sample_n = step_samples(base, new, sb, sn, runs, steps_chosen=chosen)
        assert (sample_b.values, sample_n.values) == ((1_000_000,) * 6, (1_200_000,) * 6)
        assert sample_b.describe() == "6 recorded steps"


def test_rows_of_many_steps_take_evenly_spaced_ones():
    from opscope.diff.rows import MAX_ROW_STEPS, row_steps

    steps = tuple(range(1, 121))
    chosen = row_steps(steps)
    assert len(chosen) == MAX_ROW_STEPS == len(set(chosen)) and chosen[0] == 1 and chosen[-1] == 120
    assert row_steps(steps[:MAX_ROW_STEPS]) == steps[:MAX_ROW_STEPS] and row_steps(None) is None
