"""The worker deno starts is its modules joined into one JavaScript file (worker/join.ts):
the joined program does exactly what the modules do, and a form the joiner does not
understand fails the staging instead of running changed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pydeno.host.process import staging

WORKER = staging.worker_entry().parent
JOIN = WORKER / "join.ts"
FLAGS = ["run", "--quiet", "--no-config", "--no-lock", "--no-remote", "--no-npm"]


def _deno(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [staging.find_deno(), *args],
        input=stdin,
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _join(folder: Path) -> subprocess.CompletedProcess[str]:
    return _deno(*FLAGS, f"--allow-read={folder}", str(JOIN), str(folder / "main.ts"), cwd=folder)


def _modules(folder: Path, modules: dict[str, str]) -> Path:
    for name, text in modules.items():
        (folder / f"{name}.ts").write_text(text)
    return folder


# Every form the joiner understands, with text that a careless join would change: spaces and
# comment-like text in strings, templates and regular expressions, and a statement that
# continues on the next line.
PROGRAM = {
    "log": "export const lines: string[] = [];\nexport function log(s: string): void { lines.push(s); }\n",
    "b": (
        'import { log } from "./log.ts";\nlog("b");\n'
        "export function b(): string { return 'b'; }\n"
        'export class C { name = "c"; }\n'
        "export function* g(): Generator<number> { yield 7; }\n"
    ),
    "a": (
        'import { b, C as Renamed, type T } from "./b.ts";\nimport type { Never } from "./b.ts";\n'
        'import { log } from "./log.ts";\nlog("a");\n'
        "// a comment with import { x } from './nowhere.ts' in it\n"
        'export const X: number = 1, Y = [2, 3], Z = { k: "v  w", f: (p: number) => p * 2 };\n'
        "export async function f(): Promise<number> { return 4; }\n"
        "export class K extends Renamed { m(): string { return b() + this.name; } }\n"
    ),
    "main": (
        'import { X, Y, Z, f, K } from "./a.ts";\nimport { b, C, g } from "./b.ts";\n'
        'import { lines } from "./log.ts";\nlines.push("main");\n'
        "const s = `two  spaces ${X + 1} and // not a comment /* nor this */\nnext  line`;\n"
        "const re = /a  b\\/c [/*] /;\n"
        "const t: number = 5;\n"
        "let v = 1\n+ 2\n"
        "const q = \"it's\" === undefined ? 0 : 'x  /* y */ z';\n"
        "console.log(JSON.stringify([lines, X, Y, Z.k, Z.f(3), b(), new C().name, new K().m(), [...g()],"
        " s, re.source, t, v, q, await f()]));\n"
    ),
}


def test_the_joined_program_prints_what_its_modules_print_run_as_they_are(tmp_path: Path) -> None:
    folder = _modules(tmp_path, PROGRAM)
    joined = _join(folder)
    assert joined.returncode == 0, joined.stderr
    (folder / "joined.js").write_text(joined.stdout)
    as_modules = _deno(*FLAGS, str(folder / "main.ts"), cwd=folder)
    as_joined = _deno(*FLAGS, str(folder / "joined.js"), cwd=folder)
    assert as_modules.returncode == 0, as_modules.stderr
    assert as_joined.stdout == as_modules.stdout
    # Modules run in the order deno runs them: each after what it imports.
    assert json.loads(as_joined.stdout)[0] == ["b", "a", "main"]
    assert "import" not in joined.stdout.replace("import.meta", "")


@pytest.mark.parametrize(
    ("module", "refused"),
    [
        ('import log from "./log.ts";\n', 'only "import { ... } from" is understood'),
        ('import * as log from "./log.ts";\n', 'only "import { ... } from" is understood'),
        ('import { log } from "npm:log";\n', 'an import of "npm:log": only ./<module>.ts is understood'),
        ("const a = 1;\nexport { a };\n", "only exported functions, classes and constants are understood"),
        ("export default 1;\n", "only exported functions, classes and constants are understood"),
        ("export let a = 1;\n", "only exported functions, classes and constants are understood"),
        ("const o = { a: 1 };\nexport const { a } = o;\n", "an exported constant is a pattern"),
        ("export const a = 1\nexport const b = 2;\n", 'the export of a does not end with ";"'),
    ],
)
def test_a_form_the_joiner_does_not_understand_fails_with_what_and_where(
    tmp_path: Path, module: str, refused: str
) -> None:
    folder = _modules(tmp_path, {"log": "export const log = 1;\n", "odd": module, "main": 'import "./odd.ts";\n'})
    joined = _join(folder)
    assert joined.returncode != 0
    assert f"join.ts: odd.ts: {refused}" in joined.stderr


def test_an_import_cycle_is_refused(tmp_path: Path) -> None:
    folder = _modules(
        tmp_path,
        {
            "a": 'import { b } from "./b.ts";\nexport const a = 1;\n',
            "b": 'import { a } from "./a.ts";\nexport const b = 2;\n',
            "main": 'import { a } from "./a.ts";\n',
        },
    )
    joined = _join(folder)
    assert joined.returncode != 0
    assert "an import cycle" in joined.stderr


def test_the_joiner_returns_every_name_each_worker_module_exports() -> None:
    # A name left out would reach its importers as undefined, and fail only where it is used.
    modules = sorted(p.stem for p in WORKER.glob("*.ts") if p.stem not in ("main", "join"))
    script = (
        f"import {{ convert }} from {json.dumps(JOIN.as_uri())};\n"
        "const out = {};\n"
        f"for (const name of {json.dumps(modules)}) {{\n"
        f"  const url = new URL(`${{name}}.ts`, {json.dumps(WORKER.as_uri() + '/')});\n"
        "  const ns = await import(url.href);\n"
        "  const joined = convert(name, Deno.readTextFileSync(url)).exports;\n"
        "  out[name] = [Object.keys(ns).sort(), [...joined].sort()];\n"
        "}\n"
        "console.log(JSON.stringify(out));\n"
    )
    probe = _deno(*FLAGS, f"--allow-read={WORKER}", "-", cwd=WORKER, stdin=script)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert set(found) == set(modules)
    for name, (exported, returned) in found.items():
        assert returned == exported, name


def test_a_worker_starts_from_the_joined_file_staged_beside_its_modules(tmp_path: Path) -> None:
    staged = staging.stage(os.path.realpath(staging.find_deno()), staging.worker_entry(), tmp_path)
    assert staged.entry.name == staging.JOINED
    assert (staged.entry.parent / "main.ts").is_file()
    text = staged.entry.read_text()
    assert "const $m_codec = (() => {" in text
    assert "sourceMappingURL" not in text


def test_a_worker_whose_modules_cannot_be_joined_fails_its_staging_with_an_os_error_saying_why(tmp_path: Path) -> None:
    sources = tmp_path / "worker"
    sources.mkdir()
    for source in WORKER.glob("*.ts"):
        (sources / source.name).write_bytes(source.read_bytes())
    (sources / "main.ts").write_text('import * as codec from "./codec.ts";\n' + (WORKER / "main.ts").read_text())
    (tmp_path / "root").mkdir()
    with pytest.raises(
        OSError, match=r"could not be joined into one program: .*main\.ts: only \"import \{ \.\.\. \} from\""
    ):
        staging.stage(os.path.realpath(staging.find_deno()), sources / "main.ts", tmp_path / "root")
