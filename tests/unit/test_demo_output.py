"""The demo's quiet terminal and its chart, without services."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tidemark.controller.model import Watermark
from tidemark.demo import DemoReport
from tidemark.demo_chart import write_chart


def test_children_write_to_the_log_and_the_terminal_stays_clean(tmp_path):
    log = tmp_path / "logs" / "demo.log"
    script = textwrap.dedent(
        f"""
        import subprocess, sys, logging
        from pathlib import Path
        from tidemark.cli.demo import quiet_output
        with quiet_output(Path({str(log)!r})) as terminal:
            subprocess.run(["sh", "-c", "echo jvm-noise; echo worker-noise >&2"], check=True)
            print("python print")
            logging.getLogger("x").warning("a warning")
            terminal.write("shown\\n")
        print("after")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "shown\nafter\n"
    assert done.stderr == ""
    text = log.read_text()
    for noise in ("jvm-noise", "worker-noise", "python print", "a warning"):
        assert noise in text


def test_chart_is_a_png(tmp_path):
    report = DemoReport("demo/s", str(tmp_path), 3, 2_000)
    report.events = [(10_000, 1_000), (10_500, 1_500), (11_000, 2_000)]
    report.watermarks = [
        Watermark("demo/s", 1_000, 1_200, {0: 1}, 0),
        Watermark("demo/s", 1_999, 2_000, {0: 3}, 1),
    ]
    report.emitted_at = {0: 11_200, 1: 12_100}
    report.seek_time = 1_500
    path = write_chart(report, tmp_path / "chart.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000
