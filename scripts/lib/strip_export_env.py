#!/usr/bin/env python3
"""strip_export_env.py EXPORT.sqlite [--keep-env NAME]... [--path OLD=NEW]...

The one edit fixtures/README.md allows on a real nsys export: remove the recorded environment of the profiled
machine, and nothing else. In place:
  - META_DATA_CAPTURE rows `PROCESS_n:ENVIRONMENT_VARIABLE` are deleted (except values `NAME=…` for a --keep-env NAME);
  - TARGET_INFO_SYSTEM_ENV's `DeviceEnvironment` row (`;`-separated NAME=value list) is deleted, or, when
    --keep-env names variables, reduced to those entries in their recorded order;
  - StringIds values holding a NUL-separated environment tail are cut at the first NUL;
  - workspace paths OLD are replaced by NEW in META_DATA_CAPTURE and StringIds values;
then VACUUM. No timing, id or count is touched."""
import sqlite3
import sys


def main(argv):
    path, keep, paths = None, [], []
    it = iter(argv)
    for a in it:
        if a == "--keep-env":
            keep.append(next(it))
        elif a == "--path":
            old, new = next(it).split("=", 1)
            paths.append((old, new))
        else:
            path = a
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
    kept = lambda v: any(v.startswith(k + "=") for k in keep)
    n_meta = 0
    if "META_DATA_CAPTURE" in tables:
        for rowid, value in db.execute(
            "select rowid, value from META_DATA_CAPTURE where name like 'PROCESS_%:ENVIRONMENT_VARIABLE'"
        ).fetchall():
            if not kept(value or ""):
                db.execute("delete from META_DATA_CAPTURE where rowid = ?", (rowid,))
                n_meta += 1
    n_dev = 0
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        for rowid, value in db.execute(
            "select rowid, value from TARGET_INFO_SYSTEM_ENV where name = 'DeviceEnvironment'"
        ).fetchall():
            entries = [e for e in (value or "").split(";") if kept(e)]
            if entries:
                db.execute("update TARGET_INFO_SYSTEM_ENV set value = ? where rowid = ?", (";".join(entries), rowid))
            else:
                db.execute("delete from TARGET_INFO_SYSTEM_ENV where rowid = ?", (rowid,))
            n_dev += 1
    n_str = 0
    for rowid, blob in db.execute(
        "select rowid, cast(value as blob) from StringIds where instr(cast(value as blob), x'00') > 0"
    ).fetchall():
        head = bytes(blob).split(b"\0", 1)[0].decode("utf-8", "replace")
        db.execute("update StringIds set value = ? where rowid = ?", (head, rowid))
        n_str += 1
    n_path = 0
    for old, new in paths:
        for table in ("META_DATA_CAPTURE", "StringIds"):
            if table in tables:
                cur = db.execute(f"update {table} set value = replace(value, ?, ?) where instr(value, ?) > 0", (old, new, old))
                n_path += cur.rowcount
    db.commit()
    db.execute("vacuum")
    db.close()
    print(f"{path}: removed {n_meta} environment rows, {n_dev} DeviceEnvironment row(s) "
          f"(kept: {', '.join(keep) or 'none'}), cut {n_str} NUL-separated StringIds tails, {n_path} path rewrites",
          file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
