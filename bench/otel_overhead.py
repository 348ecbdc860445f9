"""What the OpenTelemetry spans cost a search when no tracer provider is set (the usual case).

One user with ``--records`` realistic records in a real store; ``mem.search`` with no method (the
package default) timed call by call with the instrumentation on (the API's non-recording spans:
one per operation, one per stage) and switched off (``PERSONAMEM_OTEL=0``: the wrappers call
straight through), rotating which goes first, a different query each time.

Gate: p50(on) / p50(off) <= 1.03 (issue 61). The last stdout line is
``otel_search_p50_ratio: R (target <= 1.03)``; the exit status is 1 when it is missed.

    python bench/otel_overhead.py [--records 500] [--iters 400]
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
from pathlib import Path

from _common import QUERIES, log, realistic_text
from harness import arguments, gate, median_ratio, paired

TARGET = 1.03


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=500, help="records of the user searched")
    parser.add_argument("--iters", type=int, default=400, help="timed searches per side")
    args = parser.parse_args()

    import personamem.telemetry
    from personamem import PersonaMem
    from personamem.encoder import default_encoder

    rng = random.Random(0)

    def search(on: bool, i: int) -> object:
        personamem.telemetry.enabled = on
        return mem.search("u", QUERIES[i % len(QUERIES)] + f" ({i})", k=10)

    with (
        tempfile.TemporaryDirectory(prefix="bench-otel-") as tmp,
        PersonaMem.open(Path(tmp) / "store", encoder=default_encoder()) as mem,
    ):
        mem.add_many([{"id": f"r{i}", "text": realistic_text(rng)} for i in range(args.records)], user_id="u")
        times = paired({"on": lambda i: search(True, i), "off": lambda i: search(False, i)}, args.iters)
    p50 = {name: statistics.median(found) * 1e3 for name, found in times.items()}
    log(f"search p50: spans on {p50['on']:.2f} ms, off {p50['off']:.2f} ms")
    return gate("otel_search_p50_ratio", median_ratio(times["on"], times["off"]), TARGET)


if __name__ == "__main__":
    sys.exit(main())
