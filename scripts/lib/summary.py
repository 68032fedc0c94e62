#!/usr/bin/env python3
"""One-line human summaries of nsyskit documents for scripts/demo (stdin or a file; stdout)."""
import json
import sys
import textwrap


def dur(ns):
    """A duration for a human: 5.838 s, 524.242 ms, 146.3 us, 820 ns."""
    a = abs(ns)
    if a >= 1e9:
        return "%.3f s" % (ns / 1e9)
    if a >= 1e6:
        return "%.3f ms" % (ns / 1e6)
    if a >= 1e3:
        return "%.1f µs" % (ns / 1e3)
    return "%d ns" % ns


def wrap(text, indent):
    """Whole words on lines of at most 110 characters, never cut mid-word."""
    return textwrap.fill(text, width=110, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False)


def main():
    what, path = sys.argv[1], sys.argv[2]
    d = json.load(open(path))
    if what == "stats":
        for k in d["top_kernels"]:
            print("  %5.1f%%  %11s  %s" % (k["share"] * 100, dur(k["total_time_ns"]), k["name"][:80]))
        t = d.get("totals") or {}
        if t:
            print("  (%d of %d kernel names listed; shares are of all %s of kernel time)"
                  % (len(d["top_kernels"]), t.get("kernels", 0), dur(t.get("total_time_ns", 0))))
    elif what == "gate":
        print("  %-5s (exit %s)  %s" % (d["verdict"], sys.argv[4], sys.argv[3]))
        for g in d["gates"]:
            if g["verdict"].lower() == "retry":
                print(wrap("%s: %s" % (g["id"], g["reason"]), "         "))
    elif what == "readiness":
        print(wrap("verdict: %s | %s" % (d.get("verdict"), d.get("reason")), "  "))
    elif what == "steps":
        dist = d.get("distributions") or {}
        w, v = dist.get("wall") or {}, d.get("verdict") or {}
        print("  %d steps of %s: wall median %s, p99 %s; %d outliers; verdict %s"
              % (len(d.get("steps") or []), d.get("step_label"), dur(w.get("median", 0)), dur(w.get("p99", 0)),
                 len(d.get("outliers") or []), v.get("class")))
        if v.get("reason"):
            print(wrap(v["reason"], "    "))
    elif what == "report":
        dec = d.get("decision") or {}
        if d.get("headline"):
            print(wrap("headline: %s" % d["headline"], "  "))
        print("  class: %s (%s)" % (d.get("class"), dec.get("rule")))
        print(wrap(dec.get("reason", ""), "    "))
        c = d.get("capture") or {}
        if c:
            print("  capture: %s, driver %s, nsys %s, started %s, %s"
                  % (", ".join(c.get("gpus") or ["GPU unknown"]), c.get("driver_version"), c.get("nsys_version"),
                     c.get("captured_at"), dur(c["duration_ns"]) if c.get("duration_ns") else "duration unknown"))
        sp = d.get("primary_split")
        if sp and sp.get("children"):
            parts = ", ".join("%s %.1f%%" % (x["label"], x["share_of_primary"] * 100) for x in sp["children"][:4])
            print(wrap("%s (%s) = %s" % (sp["label"], dur(sp["host_wall_time_ns"]), parts), "  "))
        for c in (d.get("categories") or [])[:4]:
            print("  kernel category %-12s %5.1f%%" % (c["category"], c["share"] * 100))
        for line in (d.get("unattributed") or {}).get("statements", []):
            print(wrap("unattributed: " + line, "    "))
    elif what == "compare":
        print("  verdict: %s" % d.get("verdict"))
        for inv in (d.get("invalidators") or [])[:5]:
            print(wrap(inv.get("reason") if isinstance(inv, dict) else str(inv), "    "))
    elif what == "bundle":
        print("  top-level keys:", list(d))
        print("  kernel_profile:", list(d.get("kernel_profile", {})))


if __name__ == "__main__":
    main()
