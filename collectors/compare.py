# SPDX-License-Identifier: GPL-2.0-only
"""`qprof compare`: a matrix of configurations run interleaved and
repeated (A B C A B C ...); describe/comparison.py summarises each
configuration by its median and spread, with ratios against the first
and a flag where a difference is larger than the run-to-run spread.

Interleaving spreads this shared machine's drift over every
configuration alike, so ratios taken within one comparison hold even
when absolute figures wander between sessions.
"""

from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Callable, Dict, List

from qprof import errors, remains
from qprof.collectors import environment, placement, preflight, runner
from qprof.describe import comparison, link, options, plan, transports
from qprof.files import COMPARISON_RECORD, COMPARISONS_SUBDIR
from qprof.rundir import RunDir

# The --vary keys: the options describe/options.py marks as variable,
# each parsed and range-checked by its own Option, then the whole
# configuration resolved by plan.resolve like `qprof run`'s flags.
VARY_KEYS = options.VARY_KEYS


@dataclass
class Config:
    stack: str
    overrides: Dict[str, str]  # vary key -> value as the user wrote it
    opts: options.RunOptions

    @property
    def label(self) -> str:
        return " ".join([self.stack] + [f"{k}={v}" for k, v in self.overrides.items()])


def parse_vary(items: List[str]) -> Dict[str, List[str]]:
    """['gso=on,off'] -> {'gso': ['on', 'off']}, refusing unknown keys,
    empty or repeated values and keys given twice."""
    out: Dict[str, List[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise errors.BadValue(f"--vary '{item}' is not KEY=V1,V2; write it like gso=on,off.")
        if key not in VARY_KEYS:
            raise errors.BadValue(f"unknown --vary key '{key}'; the keys are: {', '.join(VARY_KEYS)}.")
        if key in out:
            raise errors.BadValue(f"--vary {key} is given twice; list all its values in one: {key}=V1,V2.")
        vals = [v.strip() for v in values.split(",")]
        if not all(vals):
            raise errors.BadValue(f"--vary {key} has an empty value in '{values}'; write it like {key}=V1,V2.")
        if len(set(vals)) != len(vals):
            raise errors.BadValue(f"--vary {key} lists a value twice ('{values}'); give each once.")
        out[key] = vals
    return out


def build_matrix(
    base: options.RunOptions, stack_names: List[str], vary: Dict[str, List[str]], fixed_flags: List[str]
) -> List[Config]:
    """Every configuration, each resolved and checked as `qprof run` would
    resolve it, before anything runs. fixed_flags: the vary keys the user
    also gave as plain flags (a conflict)."""
    for key in vary:
        if key in fixed_flags:
            raise errors.BadValue(f"--{key} is both fixed and varied; drop one of --{key} and --vary {key}.")
    configs = []
    keys = list(vary)
    for stack in stack_names:
        for values in product(*(vary[k] for k in keys)):
            overrides = dict(zip(keys, values))
            label = Config(stack, overrides, base).label
            try:
                fields = {
                    options.BY_NAME[k].field: options.BY_NAME[k].parse(v)
                    for k, v in overrides.items()
                    if k not in options.LINK_PARTS
                }
                fields["link"] = fields.get("link", base.link)
                for k in options.LINK_PARTS:
                    if k in overrides:
                        fields["link"] = link.with_key(fields["link"], k, overrides[k])
                opts = plan.resolve(replace(base, stack=stack, **fields)).options
            except errors.QprofError as e:
                raise type(e)(f"configuration '{label}': {e.sentence}")
            configs.append(Config(stack, overrides, opts))
    if len(configs) < 2:
        raise errors.BadValue("a comparison needs at least two configurations; add --vary KEY=V1,V2 or --stacks S1,S2.")
    return configs


def check_machine(configs: List[Config]) -> None:
    """What only this machine can answer (collectors/preflight.py: root,
    each stack's workload built, kernel TLS, the congestion control, an
    --msquic file it can load) for every configuration, before the first
    run: one it cannot run is refused before anything is measured. A
    refusal every configuration shares (not root, nothing built) is the
    machine's and said as such; else the first configuration refused is
    named with its own reason."""
    refused = []
    for c in configs:
        try:
            preflight.check(plan.resolve(c.opts))
        except errors.QprofError as e:
            refused.append((c, e))
    if not refused:
        return
    first_config, first = refused[0]
    if len(refused) == len(configs) and all(e.sentence == first.sentence for _, e in refused):
        raise first
    raise type(first)(f"configuration '{first_config.label}': {first.sentence}")


def parse_stacks(text: str) -> List[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise errors.BadValue("--stacks is empty; list them like --stacks quic,tcp-tls,tcp.")
    if len(set(names)) != len(names):
        raise errors.BadValue(f"--stacks lists a stack twice ('{text}'); give each once.")
    for n in names:
        if n not in transports.STACKS:
            raise errors.UnknownStack(f"unknown stack '{n}'; valid stacks are: {', '.join(transports.STACKS)}.")
    return names


# --- running ----------------------------------------------------------------------


@dataclass
class CompareOptions:
    configs: List[Config]
    repeat: int = 3
    runs_dir: str = "runs"
    vary: Dict[str, List[str]] = field(default_factory=dict)


def flame_diff(runs_dir: Path, out_dir: Path, a: dict, b: dict) -> dict:
    """The differential graphs of two runs (B against A, per byte, or per
    request for rr runs: the keys say which), or why there are none; a
    comparison without stacks is still a comparison."""
    from qprof.flamegraphs import diff, sides

    try:
        run_a, run_b = sides.load_run(runs_dir, a["id"]), sides.load_run(runs_dir, b["id"])
        drawn = diff.render(run_a, run_b, sides.SIDES, lambda side: out_dir / f"flame-diff-{side}.svg")
    except (errors.NoStacks, errors.BadStacks, errors.IncompatibleRuns) as e:
        return {"a": a["id"], "b": b["id"], "absent": e.sentence}
    return {
        "a": a["id"],
        "b": b["id"],
        "sides": {
            d.side: {
                "svg": d.svg.name if d.svg else None,
                f"a_ns_per_{d.unit.name}": d.a_ns_per_unit,
                f"b_ns_per_{d.unit.name}": d.b_ns_per_unit,
                "change_percent": d.change_percent,
            }
            for d in drawn
        },
    }


@contextmanager
def shared_placement(copts: CompareOptions):
    """--guest: one guest for every run (the started one, or one booted
    once), prepared before the comparison's directory exists; else each
    run's own (None)."""
    if not copts.configs[0].opts.guest:  # not a --vary key: every configuration's alike
        yield None
        return
    where = placement.Guest()
    where.prepare()
    try:
        yield where
    finally:
        where.close()


def run(copts: CompareOptions, on_run: Callable[[int, int, Config], None], on_done: Callable[[dict], None]) -> dict:
    """Every configuration `repeat` times, interleaved; the comparison
    record, written as it goes so a failure leaves what was done."""
    root = Path(copts.runs_dir) / COMPARISONS_SUBDIR
    with (
        remains.exclusive("compare"),
        shared_placement(copts) as where,
        RunDir(root, record_name=COMPARISON_RECORD) as cdir,
    ):
        cdir.record.update(
            {
                "kind": "comparison",
                "order": "interleaved",
                "repeat": copts.repeat,
                "vary": copts.vary,
                "configs": [
                    {"label": c.label, "stack": c.stack, "overrides": c.overrides, "options": asdict(c.opts)}
                    for c in copts.configs
                ],
                "runs": [],
            }
        )
        cdir.save()
        runs = []
        total = copts.repeat * len(copts.configs)
        for rep in range(copts.repeat):
            for i, cfg in enumerate(copts.configs):
                on_run(len(runs) + 1, total, cfg)
                rec = runner.run(cfg.opts, on_progress=lambda msg: None, where=where)
                entry = {
                    "id": rec["id"],
                    "config": i,
                    "repeat": rep,
                    "path": str(Path("..") / ".." / rec["id"]),
                    "record": rec,
                }
                runs.append(entry)
                cdir.record["runs"].append({k: v for k, v in entry.items() if k != "record"})
                cdir.save()
                on_done(entry)
        result = {
            **{k: v for k, v in cdir.record.items() if k not in ("id", "status")},
            "path": str(cdir.path),
            "environment": environment.describe(),
            **comparison.record_figures(copts.configs, runs),
        }
        a, b = comparison.representative(runs, 0), comparison.representative(runs, 1)
        result["flame_diff"] = (
            flame_diff(Path(copts.runs_dir), cdir.path, a["record"], b["record"])
            if a and b
            else {"absent": "no run of the first two configurations has CPU figures"}
        )
        cdir.complete(result)
        return cdir.record
