#!/usr/bin/env python3
"""npm packages (pydeno.Packages): what bundling costs once, and what a package costs a fresh
runtime and a pool.

- **Bundle, cold cache**: a new cache directory (deno's npm cache included), so the
  registry's metadata and tarballs are fetched; the first run on a machine also fetches the
  bundler's engine once (reported apart).
- **Bundle, warm npm cache**: a new bundle cache over an npm cache that already holds the
  package: the bundler's own time.
- **First use in a fresh runtime**: start a runtime and run its first eval, as the README
  writes it (``await import(...)``), with the package against the same eval shape without
  one (``await Promise.resolve(0)``: both pay the first top-level ``await``) and against the
  import of a tiny module (which also pays the worker's first module load).
- **Pool checkout + first eval**: a pool whose workers start with the package (sent with
  their start, in the background) against one without, the eval using the package or not.

There is no peer figure: the reference peer has no npm packages. Usage::

    python benchmarks/bench_packages.py [--rounds N] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common.output import write_json  # noqa: E402

import pydeno  # noqa: E402

DEFAULT_OUTPUT = HERE / "results" / "bench_packages.json"
SPECS = {"date-fns@3.6.0": "date-fns", "zod@3.23.8": "zod", "lodash-es@4.17.21": "lodash-es"}


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# Not _common.stats.summary: this file's JSON has always had the median and the minimum,
# rounded, for its few samples.
def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1e3 for s in samples)
    return {"p50_ms": round(statistics.median(ms), 2), "min_ms": round(ms[0], 2), "n": len(ms)}


def bundle_figures(root: Path) -> dict[str, Any]:
    engine = root / "engine"
    # The bundler's engine on its own, first: a throwaway package in a new cache.
    first = timed(lambda: pydeno.Packages(["left-pad@1.3.0"], cache_dir=engine))
    out: dict[str, Any] = {"first_bundle_with_engine_fetch_s": round(first, 2)}
    for spec in SPECS:
        cold = root / f"cold-{spec}"
        # A new cache, with the engine copied in (it is fetched once per machine, not per package).
        (cold / "work" / "deno").mkdir(parents=True)
        _copy_engine(engine, cold)
        cold_s = timed(lambda spec=spec, cold=cold: pydeno.Packages([spec], cache_dir=cold))
        (cold / "bundles").rename(cold / "bundles-old")
        (cold / "index.json").unlink()
        warm_s = timed(lambda spec=spec, cold=cold: pydeno.Packages([spec], cache_dir=cold))
        size = pydeno.Packages([spec], cache_dir=cold, offline=True).describe()[0]["bytes"]
        out[spec] = {
            "bundle_cold_cache_s": round(cold_s, 3),
            "bundle_warm_npm_cache_s": round(warm_s, 3),
            "bytes": size,
        }
    return out


def _copy_engine(source: Path, target: Path) -> None:
    import shutil

    dl = source / "work" / "deno" / "dl"
    if dl.is_dir():
        shutil.copytree(dl, target / "work" / "deno" / "dl")
    esbuild = source / "work" / "deno" / "npm" / "registry.npmjs.org" / "@esbuild"
    if esbuild.is_dir():
        shutil.copytree(esbuild, target / "work" / "deno" / "npm" / "registry.npmjs.org" / "@esbuild")


def first_use(pkgs: pydeno.Packages, name: str, rounds: int) -> dict[str, Any]:
    with_package: list[float] = []
    without: list[float] = []
    code = f'const m = await import("{name}"); typeof m'

    def one(kwargs: dict[str, Any], source: str) -> float:
        start = time.perf_counter()
        with pydeno.Runtime(**kwargs) as rt:
            rt.eval(source)
            return time.perf_counter() - start

    tiny: list[float] = []
    for _ in range(rounds):
        with_package.append(one({"packages": pkgs}, code))
        without.append(one({}, "await Promise.resolve(0); typeof 0"))
        tiny.append(one({}, 'const t = await import("data:text/javascript,export default 0"); typeof t'))
    a, b, c = summary(with_package), summary(without), summary(tiny)
    return {
        "with_package": a,
        "await_without_import": b,
        "importing_a_tiny_module": c,
        "cost_over_await_p50_ms": round(a["p50_ms"] - b["p50_ms"], 2),
        "cost_over_any_import_p50_ms": round(a["p50_ms"] - c["p50_ms"], 2),
    }


def pool_figures(pkgs: pydeno.Packages, name: str, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, kwargs, code in (
        ("without_packages", {}, "1 + 1"),
        ("with_packages_plain_eval", {"packages": pkgs}, "1 + 1"),
        ("with_packages_importing", {"packages": pkgs}, f'(await import("{name}")) !== null'),
        ("without_packages_await", {}, "(await Promise.resolve(0)) === 0"),
    ):
        samples: list[float] = []
        with pydeno.SandboxPool(size=1, **kwargs) as pool:
            for _ in range(rounds):
                time.sleep(0.15)  # the spare worker is ready, as in a service between requests
                start = time.perf_counter()
                with pool.checkout() as rt:
                    rt.eval(code)
                samples.append(time.perf_counter() - start)
        out[label] = summary(samples)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json-out", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    results: dict[str, Any] = {"python": sys.version.split()[0], "pydeno": pydeno.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        results["bundle"] = bundle_figures(root)
        cache = root / "cold-date-fns@3.6.0"
        pkgs = pydeno.Packages(["date-fns@3.6.0"], cache_dir=cache, offline=True)
        results["first_use_date_fns"] = first_use(pkgs, "date-fns", args.rounds)
        results["pool_date_fns"] = pool_figures(pkgs, "date-fns", args.rounds)
    print(json.dumps(results, indent=2))
    write_json(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
