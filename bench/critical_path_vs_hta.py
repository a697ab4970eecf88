"""opscope's critical path against HolisticTraceAnalysis (HTA) 0.5.0's, on HTA's critical-path test traces.

    python bench/critical_path_vs_hta.py [SHARED_TRACES]      (default ../shared/traces)

HTA runs in its own interpreter ($OPSCOPE_HTA_PYTHON or /tmp/htavenv/bin/python) with the annotation and instance
its own tests use for each trace (tests/support/critical_path_hta.CASES). opscope's path covers the same window:
the host thread's slices inside the annotation's interval (``opscope critical-path`` itself takes only steps or
the whole trace; the window of a ``record_function`` region is computed here with ``critical_path.step_path``).
Per trace: the window, each path's length and breakdown (HTA's ``bound_by``, opscope's categories, and both
regrouped into parts both can name), the device work each put on its path, the sync edges each path took, and
the host events with the most time on each path; a markdown table of the figures last. Every time in ns.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.critical_path_hta import (
    CASES,
    REGROUPED,
    hta_device_on_path,
    hta_host_on_path,
    hta_parts,
    hta_sync_edges,
    opscope_interval_path,
    overlay_critical,
    run_hta,
    short,
)
from support.hta_live import _hta_missing


def ns(value: int) -> str:
    return f"{value:,}"


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def top(items: dict[str, int], n: int = 5) -> str:
    return ", ".join(f"{short(name, 36)} {ns(v)}" for name, v in sorted(items.items(), key=lambda i: -i[1])[:n])


def main() -> None:
    shared = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "shared" / "traces")
    missing = _hta_missing()
    if missing:
        sys.exit(f"cannot run HTA: {missing}")
    rows = []
    for case in CASES:
        hta = run_hta(case, shared)
        ours = opscope_interval_path(shared / case.trace, case.annotation, case.instance)
        lo, hi = hta["window"]
        what = f"annotation {case.annotation!r} instance {case.instance}" if case.annotation else "the whole trace"
        print(f"== {case.key}: {what}")
        print(f"   window  HTA {ns(lo)}..{ns(hi)} ({ns(hi - lo)})   opscope {ns(ours.window[0])}..{ns(ours.window[1])} "
              f"({ns(ours.window[1] - ours.window[0])})")
        span = hta["last"]["ts"] - hta["first"]["ts"]
        print(f"   HTA path      {ns(hta['length'])} = {pct(hta['length'], hi - lo)} of the window; its nodes span "
              f"{ns(span)} ({ns(hta['first']['ts'] - lo)} after the window's start to {ns(hi - hta['last']['ts'])} "
              f"before its end); zero-weight edges inside the span: {ns(span - hta['length'])}")
        print(f"   opscope path  {ns(ours.length)} = {pct(ours.length, hi - lo)} of the window "
              f"({ns(ours.start)}..{ns(ours.end)})")
        print(f"   HTA bound_by  {', '.join(f'{k}: {ns(v)}' for k, v in sorted(hta['by_bound'].items()) if k)}")
        print(f"   opscope       {', '.join(f'{k}: {ns(v)}' for k, v in sorted(ours.categories.items()))}")
        theirs = hta_parts(hta)
        print(f"   {'regrouped':18} {'HTA':>16} {'opscope':>16} {'opscope - HTA':>16}")
        for part in REGROUPED:
            print(f"   {part:18} {ns(theirs[part]):>16} {ns(ours.parts[part]):>16} "
                  f"{ns(ours.parts[part] - theirs[part]):>16}")
        h_dev, o_dev = hta_device_on_path(hta), ours.device
        h_corr, o_corr = {d[4]: d for d in h_dev}, {d[4]: d for d in o_dev}
        both = sorted(set(h_corr) & set(o_corr))
        print(f"   device work on the path: HTA {len(h_dev)} ({ns(sum(d[5] for d in h_dev))}), opscope {len(o_dev)} "
              f"({ns(sum(d[5] for d in o_dev))}), both {len(both)} (HTA {ns(sum(h_corr[c][5] for c in both))}, "
              f"opscope {ns(sum(o_corr[c][5] for c in both))})")
        for label, only, src in (("HTA only", set(h_corr) - set(o_corr), h_corr),
                                 ("opscope only", set(o_corr) - set(h_corr), o_corr)):
            if only:
                names: dict[str, int] = {}
                for c in only:
                    names[src[c][0]] = names.get(src[c][0], 0) + src[c][5]
                print(f"     {label}: {len(only)} ({ns(sum(src[c][5] for c in only))}): {top(names, 4)}")
        kernels: dict[str, int] = {}
        for d in h_dev:
            kernels[d[0]] = kernels.get(d[0], 0) + d[5]
        if kernels:
            print(f"     top device work on HTA's path: {top(kernels, 4)}")
        h_sync, o_sync = hta_sync_edges(hta), ours.sync_edges
        print(f"   sync edges on the path (from corr -> to corr): both {sorted(h_sync & o_sync)[:6]}"
              f"{' ...' if len(h_sync & o_sync) > 6 else ''}; HTA only {sorted(h_sync - o_sync)}; "
              f"opscope only {sorted(o_sync - h_sync)}")
        print(f"   top host  HTA: {top(hta_host_on_path(hta))}")
        print(f"             opscope: {top(ours.host)}")
        if case.overlay:
            stored = overlay_critical(shared / case.overlay)
            live = hta["overlay_critical"]
            same = len({tuple(x) for x in stored} & {tuple(x) for x in live})
            print(f"   HTA's stored overlaid output marks {len(stored)} events critical; HTA 0.5.0 here marks "
                  f"{len(live)}, {same} of them the same")
        rows.append((case.key, hi - lo, hta["length"], ours.length, theirs, ours.parts, len(h_dev),
                     sum(d[5] for d in h_dev), len(o_dev), sum(d[5] for d in o_dev), len(both)))
        print()
    print("| trace | window ns | HTA path ns (of window) | opscope path ns | host HTA / opscope | "
          "device HTA / opscope (items) | launch+queue HTA / opscope | opscope gaps + sync waits | "
          "device items on both |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, win, h_len, o_len, hp, op, hn, ht, on, ot, both in rows:
        print(f"| {key} | {ns(win)} | {ns(h_len)} ({pct(h_len, win)}) | {ns(o_len)} | {ns(hp['host'])} / "
              f"{ns(op['host'])} | {ns(ht)} ({hn}) / {ns(ot)} ({on}) | {ns(hp['launch/queue lag'])} / "
              f"{ns(op['launch/queue lag'])} | {ns(op['host gap'] + op['sync wait'])} | {both} |")


if __name__ == "__main__":
    main()
