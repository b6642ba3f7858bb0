"""One cold lookup in a fresh process, for ``bench_soak``: prints a JSON line.

    python -m tests.bench.soak_probe cut ROOT STREAM T      # stream_cut_at(STREAM, T)
    python -m tests.bench.soak_probe since ROOT STREAM T    # WatermarkFeed(...).since(T)

Imports happen before the clock starts (pyarrow imports pandas lazily on
its first conversion: that too): the figure is the lookup itself (opening
the tables, statistics, the row groups read), as a process that has just
started pays it.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    what, root, stream, t = argv[0], argv[1], argv[2], int(argv[3])
    import deltalake  # noqa: F401 - imported before the clock starts
    import pyarrow as pa
    import pyarrow.parquet

    pa.array([0])  # pyarrow imports pandas on its first conversion: an import, not the lookup

    from tidemark.pipelines.reading.seek import stream_cut_at
    from tidemark.pipelines.reading.windows import WatermarkFeed

    started = time.perf_counter()
    if what == "cut":
        cut = stream_cut_at(stream, t, delta_root=root)
        result: object = {str(k): v for k, v in sorted(cut.items())}
    elif what == "since":
        result = len(WatermarkFeed(root, stream).since(t))
    else:
        raise SystemExit(f"unknown probe {what!r}: cut or since")
    elapsed = (time.perf_counter() - started) * 1000
    print(json.dumps({"ms": elapsed, "result": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
