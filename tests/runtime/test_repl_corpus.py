"""The rewrite of evals that await (worker/repl.ts) over JavaScript nobody wrote for it: the
scripts of the docs site's own packages, many of them minified (no line breaks, statements
ended by commas and automatic semicolons). Each file, with an ``await`` before it and after
it, that V8 compiles as an async function's body must be rewritten without a refusal into a
body V8 compiles too."""

from __future__ import annotations

import json
import subprocess
from importlib import util
from pathlib import Path
from typing import Final

import pytest

from pydeno.host.process.staging import find_deno

ROOT: Final = Path(__file__).resolve().parents[2]

HARNESS: Final = """
import { rewrite } from "REPL";
const core = (Deno as any)[(Deno as any).internal].core;
const names = { completion: "$c", bound: "$t", declare: "$d", functions: "$s" };
const compiles = (source: string) => core.compileFunction(source, "corpus:a", undefined, [])[1] === null;
const failures: string[] = [];
let tried = 0;
for (const file of JSON.parse(await Deno.readTextFile(Deno.args[0]))) {
  const text = await Deno.readTextFile(file);
  for (const code of ["await 0;\\n" + text, text + "\\nawait 0"]) {
    if (!compiles("(async()=>{" + code + "\\n})")) continue;
    tried++;
    const rw = rewrite(code, names);
    if (rw.error !== null) { failures.push(`${file}: refused: ${rw.error[0]} at ${rw.error[1]}`); continue; }
    if (!compiles("(async($c,$t,$d,$s)=>{" + rw.body + "\\nreturn $c})")) failures.push(`${file}: does not compile`);
  }
}
console.log(JSON.stringify({ tried, failures }));
"""


def _corpus() -> list[str]:
    files: list[str] = []
    for package in ("material", "mkdocs"):
        spec = util.find_spec(package)
        assert spec is not None and spec.origin is not None, f"{package} (pydeno[dev]) is not installed"
        files += sorted(str(p) for p in Path(spec.origin).parent.rglob("*.js") if p.stat().st_size < 1_000_000)
    return files


@pytest.mark.slow
def test_scripts_of_real_packages_are_rewritten_into_bodies_v8_compiles(tmp_path: Path) -> None:
    corpus = _corpus()
    assert len(corpus) >= 40
    listing = tmp_path / "corpus.json"
    listing.write_text(json.dumps(corpus), encoding="utf-8")
    harness = tmp_path / "harness.ts"
    harness.write_text(HARNESS.replace("REPL", (ROOT / "worker" / "repl.ts").as_uri()), encoding="utf-8")
    run = subprocess.run(
        [
            find_deno(),
            "run",
            "--quiet",
            "--no-config",
            f"--allow-read={tmp_path},{','.join(corpus)}",
            str(harness),
            str(listing),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"DENO_DIR": str(tmp_path / "cache"), "DENO_NO_UPDATE_CHECK": "1", "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["tried"] >= 60 and found["failures"] == []
