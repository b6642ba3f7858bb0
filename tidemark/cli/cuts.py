"""The CLI's one stream-cut syntax: ``segment=offset`` pairs, ``0=10,1=4``.

Every ``--cut`` flag parses here, and text output prints cuts the same way
(``--format json`` prints the JSON object ``{"0": 10, "1": 4}``, which is
accepted as input too, so a cut copied from either output works).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from tidemark.errors import ConfigurationError

CUT_HELP = "segment=offset pairs, e.g. 0=10,1=4 (or the JSON object --format json prints)"


def parse_cut(text: str, flag: str = "--cut") -> dict[int, int]:
    """``"4294967297=10,1=0"`` (or ``'{"4294967297": 10, "1": 0}'``) -> {segment id: offset}."""
    value = text.strip()
    try:
        if value.startswith("{"):
            raw = json.loads(value)
            if not isinstance(raw, dict) or any(type(v) is not int for v in raw.values()):
                raise ValueError(value)
            pairs = [(str(seg), str(off)) for seg, off in raw.items()]
        else:
            pairs = [(seg, off) for seg, _, off in (p.partition("=") for p in value.split(","))]
        cut: dict[int, int] = {}
        for seg, off in pairs:
            segment, offset = int(seg), int(off)
            if segment < 0 or offset < 0 or segment in cut:
                raise ValueError(seg)
            cut[segment] = offset
        return cut
    except ValueError:
        raise ConfigurationError(f"{flag} {text!r}: expected {CUT_HELP}") from None


def format_cut(cut: Mapping[int, int]) -> str:
    """The text form: ``{1: 4, 0: 10}`` -> ``"0=10,1=4"`` (segments in order)."""
    return ",".join(f"{seg}={off}" for seg, off in sorted(cut.items()))
