#!/usr/bin/env python3
"""One-line human summaries of nsyskit documents for scripts/demo (stdin or a file; stdout)."""
import json
import sys


def main():
    what, path = sys.argv[1], sys.argv[2]
    d = json.load(open(path))
    if what == "stats":
        for k in d["top_kernels"]:
            print("  %5.1f%%  %12d ns  %s" % (k["share"] * 100, k["total_time_ns"], k["name"][:80]))
    elif what == "gate":
        print("  %-5s (exit %s)  %s" % (d["verdict"], sys.argv[4], sys.argv[3]))
        for g in d["gates"]:
            if g["verdict"] == "retry":
                print("         %s: %s" % (g["id"], g["reason"][:120]))
    elif what == "readiness":
        print("  verdict: %s | %s" % (d.get("verdict"), d.get("reason")))
    elif what == "report":
        dec = d.get("decision") or {}
        print("  class: %s (%s)" % (d.get("class"), dec.get("rule")))
        print("   ", dec.get("reason", ""))
        for line in (d.get("unattributed") or {}).get("statements", []):
            print("    unattributed:", line)
    elif what == "compare":
        print("  verdict: %s" % d.get("verdict"))
        for inv in (d.get("invalidators") or [])[:5]:
            print("   ", inv.get("reason") if isinstance(inv, dict) else inv)
    elif what == "bundle":
        print("  top-level keys:", list(d))
        print("  kernel_profile:", list(d.get("kernel_profile", {})))


if __name__ == "__main__":
    main()
