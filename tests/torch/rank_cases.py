"""Shared by the torch tests' rank scripts and their tests: a rank writes one JSON document
(results as {"case", "ok", ...}, or the traceback as "fatal"); the test launches the ranks and
collects every case over the ranks."""
import json
import os
import pathlib
import traceback


def write_rank_doc(out_dir: str, body) -> int:
    """Runs body(doc, rank, world) (which fills doc["results"]) and writes rank-<r>.json, with
    the traceback as doc["fatal"] if it raised."""
    import torch
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    doc = {"rank": rank, "world": world, "site": os.environ.get("DETWAN_SITE", "")}
    try:
        body(doc, rank, world)
    except Exception:  # noqa: BLE001 - reported to the test
        doc["fatal"] = traceback.format_exc()[-3000:]
    with open(os.path.join(out_dir, f"rank-{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return 0


def run_cases(script: pathlib.Path, out: pathlib.Path, sites: list[str], args=(),
              env: dict | None = None, timeout_s: float = 240) -> dict[str, list[dict]]:
    """Launches one rank of `script` per site entry and returns {case: [result per rank]};
    fails the test on a missing document or a rank's traceback."""
    from lab import torchrun as launch  # tools/ (the tests' conftest puts it on the path)
    procs = launch.launch([str(script), str(out), *args], sites, env=env, log_dir=out)
    codes = launch.wait_all(procs, timeout_s)
    cases: dict[str, list[dict]] = {}
    for rank in range(len(sites)):
        path = out / f"rank-{rank}.json"
        log = (out / f"rank-{rank}.log").read_text(errors="replace")[-3000:]
        assert path.exists(), f"rank {rank} wrote no result (exit {codes[rank]}):\n{log}"
        doc = json.loads(path.read_text())
        assert "fatal" not in doc, f"rank {rank} failed:\n{doc['fatal']}"
        for r in doc["results"]:
            cases.setdefault(r["case"], []).append(r)
    return cases


def assert_every_rank_ok(cases: dict[str, list[dict]], ranks: int) -> None:
    for case, got in cases.items():
        assert len(got) == ranks, f"{case}: {len(got)} ranks reported it"
        bad = [r for r in got if not r["ok"]]
        assert not bad, f"{case}: {bad[0]}"
