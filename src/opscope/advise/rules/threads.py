"""CPU thread settings that do not fit the machine: more intra-op threads than usable cores (threads preempt each
other and spin in barriers), far fewer (cores left idle on a CPU-bound run), or OpenMP/MKL variables that
disagree with torch's own setting. The settings come from the run.json that ``opscope record`` writes."""

from __future__ import annotations

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule

#: Variables that set the size of the math libraries' thread pools.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def check(ctx: AdviceContext) -> list[Finding]:
    run = ctx.run
    threads = (run or {}).get("threads") or {}
    cores = ((run or {}).get("cpu") or {}).get("usable_cores")
    if not threads or not cores:
        raise NotApplicable("no run.json with thread settings (record with opscope record, or pass --run)")
    intra, inter = threads.get("intra_op"), threads.get("inter_op")
    env = (run or {}).get("environment") or {}
    problems = []
    if intra and intra > cores:
        problems.append(("intra_op", intra, f"{intra} intra-op threads on {cores} usable cores: the threads take "
                                            f"turns and wait for each other at every parallel region"))
    if inter and inter > cores:
        problems.append(("inter_op", inter, f"{inter} inter-op threads on {cores} usable cores"))
    if intra and ctx.gpu is None and cores >= 4 and intra < cores / 2:
        problems.append(("intra_op", intra, f"{intra} intra-op threads on {cores} usable cores in a CPU-only run: "
                                            f"most cores sit idle during each op"))
    for var in THREAD_VARIABLES:
        value = env.get(var)
        if value and value.isdigit() and intra and int(value) != intra:
            problems.append((var, int(value), f"{var}={value} but torch runs {intra} intra-op threads: one of the "
                                              f"two settings is not the one in effect"))
    if not problems:
        return []
    evidence = [{"setting": name, "value": value, "usable_cores": cores, "problem": text}
                for name, value, text in problems]
    best = max(1, cores)
    return [Finding(
        rule=RULE.id,
        title=f"Thread settings do not fit the {cores} usable cores: " + "; ".join(
            f"{name}={value}" for name, value, _ in problems),
        saving_ns=None,
        saving_pct=None,
        estimate=("one trace cannot tell how much faster another setting runs (that depends on the ops' "
                  "parallel scaling); opscope tune-threads measures it by running the program with each setting"),
        change=(f"measure: opscope tune-threads -- python your_script.py; as a start, torch.set_num_threads({best}) "
                f"(or OMP_NUM_THREADS={best}) and one process per core group; with DataLoader workers, leave them "
                f"cores too"),
        evidence=evidence,
        evidence_title="settings from run.json",
    )]


RULE = Rule(
    id="threads",
    title="CPU thread settings that do not fit the core count",
    explain="""\
Reads the run.json written by opscope record (or given with --run): torch's intra-op and inter-op thread
counts, the usable cores (the CPU affinity of the process) and the thread variables of the environment
(OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS).

Fires when intra-op or inter-op threads exceed the usable cores (oversubscription: threads preempt each
other and spin at barriers), when a CPU-only run uses fewer than half of at least 4 usable cores, or when a
thread variable disagrees with torch's setting.

No saving is estimated: how much another setting gains depends on how the program's ops scale with
threads, which one trace does not show. opscope tune-threads runs the program with a grid of settings and
reports the measured best, with its spread.""",
    check=check,
)
