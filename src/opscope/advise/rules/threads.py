"""CPU thread settings that do not fit the machine: more intra-op threads than usable cores (threads preempt each
other and spin in barriers), several processes each sized for every core (ranks on one host, DataLoader workers
beside a CPU-bound main process), far fewer threads than cores on a CPU-bound run, or OpenMP/MKL variables that
disagree with torch's own setting, or a host whose other processes already keep cores busy (its load average
when the program started): the intra-op threads then share cores with them, and every parallel op waits at its
barrier for a thread that is not running. The settings and the load come from the run.json that
``opscope record`` writes."""

from __future__ import annotations

import re

import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.arrays import name_match
from opscope.analyses.intervals import clip, union_ns
from opscope.model.schema import kind_mask

#: Variables that set the size of the math libraries' thread pools.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: A CPU-only run is CPU-bound when its ops run for at least this share of the window...
CPU_BOUND_SHARE = 0.5
#: ...and then uses too few threads below this share of the usable cores (with at least MIN_CORES of them).
UNDERUSE_SHARE = 0.5
MIN_CORES = 4
#: The main process's loader when DataLoader(num_workers > 0): its workers are processes of their own.
MULTIPROCESS_LOADER = "_MultiProcessingDataLoaderIter"
#: Host events that are not work: step markers, waiting for the DataLoader.
NOT_WORK = r"^ProfilerStep#|^enumerate\(DataLoader\)"


def check(ctx: AdviceContext) -> list[Finding]:
    run = ctx.run or {}
    threads = run.get("threads") or {}
    cores = (run.get("cpu") or {}).get("usable_cores")
    if not threads or not cores:
        raise NotApplicable("no run.json with thread settings beside the trace (record with opscope record, or "
                            "pass --run run.json)")
    intra, inter = threads.get("intra_op"), threads.get("inter_op")
    env = run.get("environment") or {}
    problems: list[tuple[str, float | None, str, str]] = []  # setting, value, problem, change
    counts: list[int] = []  # the intra-op thread counts the changes propose, first problem first
    if intra and intra > cores:
        problems.append(("intra_op", intra, f"{intra} intra-op threads on {cores} usable cores: they take turns on "
                                            f"the cores and wait for each other at the end of every parallel op",
                         f"torch.set_num_threads({cores})"))
        counts.append(cores)
    if inter and inter > cores:
        problems.append(("inter_op", inter, f"{inter} inter-op threads on {cores} usable cores (matters where ops "
                                            f"run in parallel: torch.jit.fork, some backends)",
                         f"torch.set_num_interop_threads({cores})"))
    host = ctx.host
    loaded = host.others if host is not None else 0  # cores other processes keep busy (rounded load average)
    # fewer threads help only down to the ones that fit (one thread waits for no other at the end of an op)
    if intra and host is not None and host.load is not None and loaded >= 1 and intra <= cores \
            and intra > host.fitting_intra_op:
        share = host.fitting_intra_op
        problems.append(("host_load", host.load, f"the host was busy when the program started: load average "
                                                 f"{host.load:.2f} (threads of other processes wanting a core) on "
                                                 f"{cores} usable cores, so {intra} intra-op threads share cores "
                                                 f"with them and every parallel op waits for a preempted thread",
                         f"torch.set_num_threads({share}) while the host is this busy (or run it on an idle host)"))
        counts.append(share)
    sharing = _processes_sharing(ctx, run)
    if intra and intra <= cores and sharing and intra * sharing[0] > cores:
        k, why = sharing
        share = max(1, cores // k)
        problems.append(("processes", k, f"{k} processes on this host ({why}) with {intra} intra-op threads each: "
                                         f"{k * intra} threads on {cores} cores",
                         f"OMP_NUM_THREADS={share} (torchrun's default is 1) or torch.set_num_threads({share}) in "
                         f"each process"))
        counts.append(share)
    busy = _cpu_busy_share(ctx) if ctx.gpu is None else None
    if intra and busy is not None and busy >= CPU_BOUND_SHARE and _multiprocess_loader(ctx) and intra >= cores:
        problems.append(("dataloader_workers", None, f"DataLoader worker processes run beside a CPU-bound main "
                                                     f"process whose {intra} intra-op threads take every core",
                         f"leave the workers cores: torch.set_num_threads({cores} - num_workers)"))
    k = sharing[0] if sharing else 1  # processes that share the cores
    if (intra and busy is not None and busy >= CPU_BOUND_SHARE and cores - loaded >= MIN_CORES
            and intra * k < UNDERUSE_SHARE * (cores - loaded)):  # the cores other processes keep busy are not idle
        others = f" ({k} processes sharing them)" if k > 1 else ""
        problems.append(("intra_op", intra, f"{intra} intra-op threads on {cores} usable cores{others} in a CPU-only "
                                            f"run whose ops run {100 * busy:.0f}% of the time: most cores sit idle "
                                            f"during each op",
                         f"torch.set_num_threads({max(1, (cores - loaded) // k)}) (or the best of opscope "
                         f"tune-threads)"))
        counts.append(max(1, (cores - loaded) // k))
    for var in THREAD_VARIABLES:
        value = env.get(var)
        if value and value.strip().isdigit() and intra and int(value) != intra:
            problems.append((var, int(value), f"{var}={value} but torch runs {intra} intra-op threads: other "
                                              f"OpenMP/BLAS code in the process (and its child processes) sizes its "
                                              f"pool from the variable",
                             f"set {var} to the thread count you mean torch to use"))
    if not problems:
        return []
    evidence = [{"setting": name, "value": value, "intra_op": intra, "usable_cores": cores,
                 "load_average": host.load if host is not None else None, "problem": text}
                for name, value, text, _ in problems]
    changes = list(dict.fromkeys(change for *_, change in problems))
    return [Finding(
        rule=RULE.id,
        title=f"Thread settings do not fit the {cores} usable cores: " + "; ".join(
            f"{name}={value}" if value is not None else name for name, value, _, _ in problems),
        saving_ns=None,
        saving_pct=None,
        estimate=("not estimated: how much faster another setting runs depends on how the program's ops scale "
                  "with threads, which one trace does not show; opscope tune-threads -- python your_script.py "
                  "measures it by running the program with each setting"),
        remedy="; ".join(changes) + "; then measure: opscope tune-threads -- python your_script.py",
        evidence=evidence,
        program_change={"intra_op_threads": counts[0]} if counts else None,
        evidence_title="settings from run.json against the usable cores (the process's CPU affinity) and the host's "
                       "1-minute load average when the program started (null when run.json lacks it)",
    )]


def _processes_sharing(ctx: AdviceContext, run: dict) -> tuple[int, str] | None:
    """How many processes of the job likely share this host's cores, and why we think so (None: unknown)."""
    env = run.get("environment") or {}
    local = env.get("LOCAL_WORLD_SIZE")
    if local and local.strip().isdigit() and int(local) > 1:
        return int(local), f"LOCAL_WORLD_SIZE={local}"
    world = ctx.trace.metadata.get("world_size")
    gpus = len(run.get("gpus") or []) or len(ctx.device_properties)
    if isinstance(world, int) and world > 1 and gpus > 1:
        k = min(world, gpus)
        return k, f"{world} ranks, assuming one per GPU of the {gpus} on this host"
    return None


def _cpu_busy_share(ctx: AdviceContext) -> float | None:
    """Share of the window during which some host op runs (any thread): the step markers and the wait for the
    next batch (which old Kineto traces record as cpu_op) do not count."""
    ev = ctx.trace.select(["kind", "name", "ts_ns", "dur_ns"])
    ops = ev.filter(kind_mask(ev, ("cpu_op",)))
    ops = ops.filter(pc.invert(pc.fill_null(name_match(ops["name"], NOT_WORK), False)))
    if not ops.num_rows or not ctx.window_ns:
        return None
    _, start, end = clip(ops["ts_ns"], ops["dur_ns"], *ctx.window)
    return union_ns(start, pc.subtract(end, start)) / ctx.window_ns


def _multiprocess_loader(ctx: AdviceContext) -> bool:
    names = ctx.trace.select(["name"])["name"]
    return bool(pc.any(name_match(names, re.escape(MULTIPROCESS_LOADER))).as_py())


RULE = Rule(
    id="threads",
    title="CPU thread settings that do not fit the core count",
    explain=f"""\
Reads the run.json written by opscope record (or given with --run): torch's intra-op and inter-op thread
counts as they were when the program started (a torch.set_num_threads call inside the program is not seen),
the usable cores (the CPU affinity of the process) and the thread variables of the environment
({', '.join(THREAD_VARIABLES)}).

Fires when:
- intra-op or inter-op threads exceed the usable cores (oversubscription: threads preempt each other and
  spin at the barrier that ends every parallel op);
- several processes on the host each run that many threads and together exceed the cores:
  LOCAL_WORLD_SIZE when the environment has it, else the trace's world size capped at the host's GPUs
  (one rank per GPU assumed);
- a CPU-only run is CPU-bound (its ops run at least {CPU_BOUND_SHARE:.0%} of the window) and DataLoader worker
  processes run beside intra-op threads on every core, or it uses fewer than {UNDERUSE_SHARE:.0%} of at least
  {MIN_CORES} usable cores (not counting the cores the host's load keeps busy);
- a thread variable disagrees with torch's setting;
- the host was busy: its 1-minute load average when the program started (run.json's cpu.load_average,
  which opscope record reads before the program runs), rounded, counts the cores other processes keep busy;
  when intra-op threads plus those exceed the usable cores, the suggestion is cores - load (at least 1). The
  load average is a smoothed count of runnable threads of the whole host, a hint, not a measure of this
  run's contention; tune-threads measures it.

No saving is estimated: how much another setting gains depends on how the program's ops scale with
threads, which one trace does not show. opscope tune-threads runs the program with a grid of settings and
reports the measured best, with its spread.""",
    check=check,
    not_simulated=('other thread counts change durations in ways the trace cannot show (opscope tune-threads '
                   'measures them)'),
)
