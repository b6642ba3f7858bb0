"""The demo's chart: event time vs watermark time, as a PNG (matplotlib, no display).

    path = write_chart(report, Path("demo/event-time-vs-watermark.png"))

x: wall-clock seconds since the first event was written; y: event time in
seconds since the first event's time. Dots are events (coloured by writer
order), the step line is the controller's watermark time as each watermark
was emitted, the dashed line its upper time. The gap between the dots and
the line is what a reader waits for completeness.
"""

from __future__ import annotations

from pathlib import Path

from tidemark.demo import DemoReport


def write_chart(report: DemoReport, path: Path) -> Path:
    # matplotlib (the demo extra): only writing a chart loads it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # as above

    if not report.events:
        raise ValueError("the demo wrote no events: nothing to chart")
    wall0 = min(w for w, _ in report.events)
    time0 = min(t for _, t in report.events)
    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    ax.scatter(
        [(w - wall0) / 1000 for w, _ in report.events],
        [(t - time0) / 1000 for _, t in report.events],
        s=6,
        color="#1f77b4",
        alpha=0.6,
        label=f"events ({len(report.events)})",
    )
    marks = [m for m in report.watermarks if report.emitted_at.get(m.seq)]
    if marks:
        xs = [(report.emitted_at[m.seq] - wall0) / 1000 for m in marks]
        ax.step(
            xs,
            [(m.time - time0) / 1000 for m in marks],
            where="post",
            color="#d62728",
            linewidth=2,
            label=f"watermark time ({len(marks)} watermarks)",
        )
        ax.step(
            xs,
            [(m.upper_time - time0) / 1000 for m in marks],
            where="post",
            color="#ff7f0e",
            linestyle="--",
            linewidth=1,
            label="watermark upper time",
        )
    ax.axhline(
        (report.seek_time - time0) / 1000,
        color="#2ca02c",
        linestyle=":",
        label="the seek timestamp",
    )
    ax.set_xlabel("wall clock: seconds since the first write")
    ax.set_ylabel("event time: seconds since the first event")
    ax.set_title(f"{report.stream}: event time vs watermark time")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


__all__ = ["write_chart"]
