# SPDX-License-Identifier: GPL-2.0-only
"""The run history: every run and comparison under a runs directory,
indexed in SQLite (RUNS_DIR/index.sqlite) for `qprof ls` and `qprof show`.

The index is a cache of the records, never the truth: each row is
`entry()` of one run.json or comparison.json (a pure function), added as
the run ends (rundir.RunDir), and `sync()` brings it up to date with the
directories before every listing (a record written, rewritten or removed
since, by its size and mtime). An index that is missing, corrupt or of
another INDEX_VERSION is rebuilt from the directories; one that cannot be
written is replaced by one in memory, with a warning. Nothing here fails a
run or a listing.
"""

import hashlib
import json
import os
import re
import sqlite3
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from . import figures, files
from .errors import BadValue
from .files import COMPARISON_RECORD, COMPARISONS_SUBDIR, RECORD, read_record

INDEX = "index.sqlite"
# Bumped whenever a column or how entry() derives it changes: an index of
# another version is rebuilt. 2: the figure columns are the table's
# (core/figures.py), rr_delay_p50_ms divided as compare divides it.
INDEX_VERSION = 2
RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
BUSY_TIMEOUT_S = 5.0

# (column, SQL type): one row per run or comparison.
COLUMNS: Tuple[Tuple[str, str], ...] = (
    ("id", "TEXT PRIMARY KEY"),
    ("kind", "TEXT NOT NULL"),  # run | comparison
    ("path", "TEXT NOT NULL"),  # the directory, relative to the runs directory
    ("status", "TEXT NOT NULL"),  # the record's, or "unreadable"
    ("error", "TEXT"),  # the record's error sentence
    ("problem", "TEXT"),  # why the record is unreadable or lacks figures a complete one has
    ("time", "TEXT"),  # ISO 8601: measured_at, else the id's start time
    ("time_unix", "REAL"),
    ("stack", "TEXT"),  # a comparison: its stacks, comma-separated
    ("pattern", "TEXT"),
    ("topology", "TEXT"),  # these option columns are null where a comparison's configurations differ
    ("streams", "INTEGER"),
    ("duration_s", "REAL"),
    ("link", "TEXT"),
    ("probes", "TEXT"),
    ("sample_hz", "INTEGER"),
    ("guest", "INTEGER"),  # 1: measured in a QEMU guest
    ("options", "TEXT"),  # JSON: a run's config; a comparison's first configuration
    ("configs", "TEXT"),  # JSON, comparisons: [{label, stack, overrides, options, medians}]
    ("vary", "TEXT"),  # JSON, comparisons
    ("repeat", "INTEGER"),  # comparisons
    ("kernel_release", "TEXT"),
    ("cpu_model", "TEXT"),
    ("cpu_count", "INTEGER"),
    ("msquic_version", "TEXT"),
    ("qprof_version", "TEXT"),
    ("qprof_commit", "TEXT"),
    ("hostname", "TEXT"),  # of the machine (a guest run's host)
    ("machine_id", "TEXT"),  # digest of hostname, CPU model and count, architecture
    *((f.column, "REAL") for f in figures.INDEXED),  # the table's figures a run's row holds
    ("window_s", "REAL"),
    ("bytes", "INTEGER"),
    ("jain_index", "REAL"),  # a mix's, or a multi-stream run's streams'
    ("record_size", "INTEGER"),  # what sync() compares with the file
    ("record_mtime_ns", "INTEGER"),
)
NAMES = tuple(c for c, _ in COLUMNS)
JSON_COLUMNS = ("options", "configs", "vary")
# What `qprof ls` calls a record with a problem, whatever its status says.
CORRUPT = "corrupt"
STATUSES = files.STATUSES + (CORRUPT,)
# The figures whose medians a comparison's row holds per configuration.
HEADLINE_METRICS = tuple(f.key for f in figures.HEADLINE)


def warn(message: str) -> None:
    print(f"qprof: warning: {message}", file=sys.stderr, flush=True)


# --- one record -> one row --------------------------------------------------------


def _time(rec: dict, run_id: str) -> Tuple[Optional[str], Optional[float]]:
    measured = rec.get("measured_at")
    if isinstance(measured, str):
        try:
            t = datetime.strptime(measured, "%Y-%m-%dT%H:%M:%S%z")
            return t.isoformat(), t.timestamp()
        except ValueError:
            pass
    try:
        t = datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").astimezone()
    except ValueError:
        return None, None
    return t.isoformat(), t.timestamp()


def machine_id(env: dict) -> Optional[str]:
    """The same machine under another kernel keeps its id."""
    parts = [env.get(k) for k in ("hostname", "cpu_model", "cpu_count", "machine")]
    if not any(parts):
        return None
    return hashlib.sha256("\0".join(str(p) for p in parts).encode()).hexdigest()[:12]


def _environment(env) -> dict:
    env = env if isinstance(env, dict) else {}
    host = env.get("host") if isinstance(env.get("host"), dict) else env
    return {
        "kernel_release": env.get("kernel_release"),
        "cpu_model": env.get("cpu_model"),
        "cpu_count": figures.number(env.get("cpu_count")),
        "msquic_version": env.get("msquic_version"),
        "qprof_version": env.get("qprof_version"),
        "qprof_commit": env.get("qprof_commit"),
        "hostname": host.get("hostname"),
        "machine_id": machine_id(host),
    }


def _common(option_sets: List[dict]) -> dict:
    """The commonly filtered options, where every configuration agrees."""

    def one(key):
        values = {json.dumps(o.get(key), sort_keys=True) for o in option_sets}
        return json.loads(values.pop()) if len(values) == 1 else None

    probes = one("probes")
    return {
        "topology": one("topology"),
        "streams": figures.number(one("streams")),
        "duration_s": figures.number(one("duration_s")),
        "link": one("link"),
        "probes": ",".join(map(str, probes)) if isinstance(probes, list) else None,
        "sample_hz": figures.number(one("sample_hz")),
    }


def _joined(values: List) -> Optional[str]:
    seen = [v for i, v in enumerate(values) if v is not None and v not in values[:i]]
    return ",".join(map(str, seen)) or None


def _run_entry(rec: dict) -> dict:
    cfg = rec.get("config") if isinstance(rec.get("config"), dict) else {}
    env = rec.get("environment")
    mix = rec.get("mix") if isinstance(rec.get("mix"), dict) else None
    streams = rec.get("streams") if isinstance(rec.get("streams"), dict) else None
    jain = mix.get("jain_index") if mix else None
    if jain is None and streams and isinstance(streams.get("bytes"), list) and len(streams["bytes"]) > 1:
        jain = streams.get("jain_index")
    row = {
        "stack": rec.get("stack") or cfg.get("stack"),
        "pattern": cfg.get("pattern") or ("bulk" if rec.get("stack") else None),
        **_common([cfg]),
        "guest": int(bool(cfg.get("guest") or figures.get(env, "emulated") or figures.get(env, "guest"))),
        "options": cfg,
        **_environment(env),
        **{f.column: f.value(rec) for f in figures.INDEXED},
        "window_s": figures.number(rec.get("window_s")),
        "bytes": figures.number(rec.get("bytes")),
        "jain_index": figures.number(jain),
    }
    return row


def _list(v) -> list:
    """A record's list, or none where a damaged one holds another type."""
    return v if isinstance(v, list) else []


def _comparison_entry(rec: dict) -> dict:
    configs = [c for c in _list(rec.get("configs")) if isinstance(c, dict)]
    option_sets = [c["options"] if isinstance(c.get("options"), dict) else {} for c in configs]
    metrics = rec.get("metrics") if isinstance(rec.get("metrics"), dict) else {}
    summary = []
    for i, c in enumerate(configs):
        medians = {}
        for key in HEADLINE_METRICS:
            rows = metrics.get(key)
            if isinstance(rows, list) and i < len(rows) and isinstance(rows[i], dict):
                medians[key] = figures.number(rows[i].get("median"))
        summary.append({**{k: c.get(k) for k in ("label", "stack", "overrides")}, "options": option_sets[i]})
        summary[-1]["medians"] = medians
    guest = any(o.get("guest") for o in option_sets) or figures.get(rec, "environment", "emulated")
    return {
        "stack": _joined([c.get("stack") for c in configs]),
        "pattern": _joined([o.get("pattern") for o in option_sets]),
        **_common(option_sets or [{}]),
        "guest": int(bool(guest)),
        "options": option_sets[0] if option_sets else {},
        "configs": summary,
        "vary": rec.get("vary"),
        "repeat": figures.number(rec.get("repeat")),
        **_environment(rec.get("environment")),
    }


def entry(kind: str, rel_path: str, run_id: str, rec, problem: Optional[str] = None) -> dict:
    """The index row of one record (None when it could not be read; then
    problem says why). A pure function of the record."""
    row = dict.fromkeys(NAMES)
    row.update({"id": run_id, "kind": kind, "path": rel_path, "status": "unreadable", "problem": problem})
    if not isinstance(rec, dict):
        row["problem"] = problem or "its record is not a JSON object"
        row["time"], row["time_unix"] = _time({}, run_id)
        return row
    row.update(_run_entry(rec) if kind == "run" else _comparison_entry(rec))
    row["status"] = rec.get("status") if isinstance(rec.get("status"), str) else "unreadable"
    row["error"] = rec.get("error") if isinstance(rec.get("error"), str) else None
    row["time"], row["time_unix"] = _time(rec, run_id)
    row["problem"] = files.problem(kind, run_id, rec)
    return {c: v if c in JSON_COLUMNS else _sql(v) for c, v in row.items()}


def _sql(v):
    """What a column holds of a record's value: text, or a number SQLite
    stores; another type (a damaged record's) is left out."""
    if isinstance(v, int):
        return int(v) if -(2**63) <= v < 2**63 else None
    return v if isinstance(v, (str, float)) else None


# --- the directories ----------------------------------------------------------------


def record_paths(root: Path) -> Iterator[Tuple[str, str, str, Path]]:
    """(kind, id, path relative to root, record path) of every run and
    comparison directory under root; `latest` links and temporary files
    are not runs."""
    for kind, base, name in (("run", root, RECORD), ("comparison", root / COMPARISONS_SUBDIR, COMPARISON_RECORD)):
        try:
            children = sorted(base.iterdir())
        except OSError:
            continue
        for d in children:
            if d.is_symlink() or not d.is_dir() or d.name.startswith("."):
                continue
            if kind == "run" and d.name == COMPARISONS_SUBDIR:
                continue
            if not (d / name).exists() and not RUN_ID.match(d.name):
                continue
            rel = d.name if kind == "run" else f"{COMPARISONS_SUBDIR}/{d.name}"
            yield kind, d.name, rel, d / name


def locate(root: Path, run_id: str) -> Optional[Tuple[str, str, str, Path]]:
    """(kind, id, relative path, record path) of a run or comparison id, or
    of `latest` (the newest run, as `qprof run` left the link); None when
    there is no such directory."""
    root = Path(root)
    if run_id == "latest":
        try:
            run_id = os.readlink(root / "latest")
        except OSError:
            return None
    if not run_id or "/" in run_id or run_id.startswith(".") or run_id == COMPARISONS_SUBDIR:
        return None
    for kind, base, name in (("run", root, RECORD), ("comparison", root / COMPARISONS_SUBDIR, COMPARISON_RECORD)):
        d = base / run_id
        if d.is_dir() and not d.is_symlink():
            rel = run_id if kind == "run" else f"{COMPARISONS_SUBDIR}/{run_id}"
            return kind, run_id, rel, d / name
    return None


def _stat(path: Path) -> Tuple[Optional[int], Optional[int]]:
    try:
        st = path.stat()
    except OSError:
        return None, None
    return st.st_size, st.st_mtime_ns


def _entry_at(kind: str, run_id: str, rel: str, path: Path) -> dict:
    size, mtime = _stat(path)
    rec, problem = read_record(path)
    row = entry(kind, rel, run_id, rec, problem)
    row["record_size"], row["record_mtime_ns"] = size, mtime
    return row


# --- the index ------------------------------------------------------------------------


def _create(db: sqlite3.Connection) -> None:
    db.execute(f"CREATE TABLE runs ({', '.join(f'{c} {t}' for c, t in COLUMNS)})")
    db.execute("CREATE INDEX runs_time ON runs (time_unix)")
    db.execute(f"PRAGMA user_version = {INDEX_VERSION}")


def _put(db: sqlite3.Connection, row: dict) -> None:
    values = [json.dumps(row[c]) if c in JSON_COLUMNS and row[c] is not None else row[c] for c in NAMES]
    db.execute(f"INSERT OR REPLACE INTO runs ({', '.join(NAMES)}) VALUES ({', '.join('?' * len(NAMES))})", values)


def _fill(db: sqlite3.Connection, root: Path) -> None:
    for kind, run_id, rel, path in record_paths(root):
        _put(db, _entry_at(kind, run_id, rel, path))


def _valid(db: sqlite3.Connection) -> bool:
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] != INDEX_VERSION:
            return False
        cols = [r[1] for r in db.execute("PRAGMA table_info(runs)")]
        return tuple(cols) == NAMES
    except sqlite3.DatabaseError:
        return False


def _in_memory(root: Path) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    _create(db)
    _fill(db, root)
    db.commit()
    return db


def _build(root: Path) -> None:
    """A fresh index from the directories, put in place whole."""
    tmp = root / f".{INDEX}.tmp{os.getpid()}"
    tmp.unlink(missing_ok=True)
    try:
        db = sqlite3.connect(tmp)
        try:
            _create(db)
            _fill(db, root)
            db.commit()
        finally:
            db.close()
        os.replace(tmp, root / INDEX)
    finally:
        tmp.unlink(missing_ok=True)


def open_index(root: Path, rebuild: bool = False) -> sqlite3.Connection:
    """The index of root's runs; missing, corrupt or of another version, it
    is rebuilt from the directories first. Where it cannot be written (or
    root does not exist), an index in memory made from the directories."""
    root = Path(root)
    if not root.is_dir():
        return _in_memory(root)
    path = root / INDEX
    try:
        if not rebuild and path.exists():
            db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
            if _valid(db):
                return db
            db.close()
        _build(root)
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
        if _valid(db):
            return db
        db.close()
        raise sqlite3.DatabaseError("the rebuilt index does not read back")
    except (sqlite3.Error, OSError) as e:
        warn(f"the run history {path} cannot be written ({_reason(e)}); listing from the run directories instead.")
        return _in_memory(root)


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def add(root: Path, record_path: Path) -> None:
    """Index one record as its run or comparison ends (rundir.RunDir): into
    the index, or with a missing, corrupt or other-version index, into one
    rebuilt from the directories. Raises what failed, for the caller to
    warn about."""
    root, record_path = Path(root), Path(record_path)
    kind = "comparison" if record_path.name == COMPARISON_RECORD else "run"
    run_id = record_path.parent.name
    rel = run_id if kind == "run" else f"{COMPARISONS_SUBDIR}/{run_id}"
    path = root / INDEX
    if path.exists():
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
        try:
            if _valid(db):
                with db:
                    _put(db, _entry_at(kind, run_id, rel, record_path))
                return
        finally:
            db.close()
    _build(root)  # this record included


def sync(db: sqlite3.Connection, root: Path) -> None:
    """Bring the index up to date with the directories: new records added,
    rewritten ones (size or mtime changed) read again, removed ones dropped."""
    known = {r[0]: (r[1], r[2], r[3]) for r in db.execute("SELECT id, path, record_size, record_mtime_ns FROM runs")}
    seen = set()
    with db:
        for kind, run_id, rel, path in record_paths(Path(root)):
            seen.add(run_id)
            if known.get(run_id) != (rel, *_stat(path)):
                _put(db, _entry_at(kind, run_id, rel, path))
        for run_id in set(known) - seen:
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))


def index(root: Path, rebuild: bool = False) -> sqlite3.Connection:
    """open_index then sync: what `qprof ls` and `qprof show` read. A
    failure to update a written index falls back to one in memory."""
    db = open_index(root, rebuild)
    try:
        sync(db, root)
    except sqlite3.Error as e:
        db.close()
        warn(f"the run history {Path(root) / INDEX} cannot be updated ({_reason(e)}); listing from the directories.")
        db = _in_memory(Path(root))
    return db


# --- queries ---------------------------------------------------------------------------


_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m|min|h|d|w)\s*$")
_SINCE_UNIT_S = {"m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: Optional[float] = None) -> float:
    """'7d', '24h', '30m', '2w' back from now, or a date or time (ISO 8601,
    local time unless it has an offset): the epoch seconds it names."""
    now = time.time() if now is None else now
    m = _SINCE.match(text)
    if m:
        return now - float(m.group(1)) * _SINCE_UNIT_S[m.group(2)]
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadValue(f"malformed --since '{text}'; write it like 7d, 24h, 30m, 2026-11-23 or 2026-11-23T18:00.")
    return (t if t.tzinfo else t.astimezone()).timestamp()


def _decode(row: dict) -> dict:
    for c in JSON_COLUMNS:
        if row.get(c) is not None:
            row[c] = json.loads(row[c])
    row["guest"] = None if row["guest"] is None else bool(row["guest"])
    return row


def _normal(v):
    return json.loads(json.dumps(v, sort_keys=True))


def options_match(row: dict, wanted: Dict[str, object]) -> bool:
    """A run matches when its options hold every wanted value; a
    comparison when one of its configurations does."""
    sets = [c.get("options") or {} for c in row.get("configs") or ()] or [row.get("options") or {}]
    want = {k: _normal(v) for k, v in wanted.items()}
    return any(all(k in o and _normal(o[k]) == v for k, v in want.items()) for o in sets)


def query(
    db: sqlite3.Connection,
    *,
    stack: Optional[str] = None,
    pattern: Optional[str] = None,
    kind: Optional[str] = None,
    status: Optional[str] = None,
    since: Optional[float] = None,
    machine: Optional[str] = None,
    options: Optional[Dict[str, object]] = None,
    limit: Optional[int] = None,
) -> List[dict]:
    """Rows newest first, filtered; a comparison matches a stack or pattern
    any of its configurations has. status: a record's own, or "corrupt"
    for those with a problem (which no other status matches). machine: a
    substring of the hostname or CPU model (any case), or the start of the
    machine id."""
    where, args = [], []
    for col, value in (("stack", stack), ("pattern", pattern)):
        if value is not None:
            where.append(f"(',' || {col} || ',') LIKE ?")
            args.append(f"%,{value},%")
    if kind is not None:
        where.append("kind = ?")
        args.append(kind)
    if status == CORRUPT:
        where.append("problem IS NOT NULL")
    elif status is not None:
        where.append("status = ? AND problem IS NULL")
        args.append(status)
    if since is not None:
        where.append("time_unix >= ?")
        args.append(since)
    if machine is not None:
        where.append("(instr(lower(hostname), ?) OR instr(lower(cpu_model), ?) OR machine_id LIKE ?)")
        args += [machine.lower(), machine.lower(), f"{machine.lower()}%"]
    sql = f"SELECT {', '.join(NAMES)} FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY time_unix DESC, id DESC"
    out = []
    for values in db.execute(sql, args):
        row = _decode(dict(zip(NAMES, values)))
        if options and not options_match(row, options):
            continue
        out.append(row)
        if limit and len(out) >= limit:
            break
    return out


def latest_ids(root: Path, n: int = 5) -> List[Tuple[str, str]]:
    """(id, kind) of the newest n runs and comparisons, never failing."""
    try:
        db = index(root)
    except Exception:
        return []
    try:
        return [(r["id"], r["kind"]) for r in query(db, limit=n)]
    finally:
        db.close()


def not_found(root: Path, run_id: str, shown: int = 5) -> str:
    """The sentence for an id with no run or comparison: the latest ones."""
    latest = latest_ids(root, shown)
    what = "no latest run" if run_id == "latest" else f"no run or comparison '{run_id}'"
    if not latest:
        return f"{what} under {root}, which holds none yet; make one with `qprof run` (or pass --runs-dir)."
    ids = ", ".join(f"{i} ({kind})" if kind == "comparison" else i for i, kind in latest)
    return f"{what} under {root}; the latest are {ids} (`qprof ls` lists them all)."
