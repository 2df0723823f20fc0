"""Print pgqueue._message_take without its session hints, for ab.py: every call probes from the
bottom of both indexes (the take statement alone, as in 0.3), so that an A/B run shows what the
hints cost a call when nothing is held (docs/performance.md, "The dequeue ladder at 0.4").

Usage: python3 bench/experiments/ab_builds/no_hints.py > /tmp/take_no_hints.sql
       (then ab.py DSN take.sql dequeue.sql /tmp/take_no_hints.sql dequeue.sql), where take.sql and
       dequeue.sql are the two files of extension/src/functions/messages/ without their COMMENT ON.
Not a build to ship: without the hints a held snapshot makes every probe walk every dead entry.
"""
import pathlib
import sys

SRC = pathlib.Path(__file__).resolve().parents[3] / "extension/src/functions/messages/_message_take.sql"


def main() -> None:
    take = SRC.read_text().split("COMMENT ON FUNCTION")[0]
    # the declarations that only the hints read lose their defaults (each is evaluated per call)
    for name in ("v_raw", "v_mine"):
        head = take.index(f"    {name} ")
        end = take.index(";", head)
        take = take[:head] + take[head:end].split(" := ")[0] + take[end:]
    begin = take.index("BEGIN\n    -- Bring the hints")
    bounds = take.index("    v_b := CASE WHEN v_moved")
    loop = take.index("    LOOP\n", bounds)
    after = take.index("    -- X: an xid the take assigned")
    ret = take.index("    RETURN v_ids;\nEND;")
    sys.stdout.write(take[:begin] + "BEGIN\n    v_b := ARRAY[c_min, c_min, c_min, c_min];\n"
                     + take[loop:after] + take[ret:])


if __name__ == "__main__":
    main()
