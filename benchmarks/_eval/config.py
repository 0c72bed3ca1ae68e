"""What bench_eval runs: the code under timing, the sizes, the sample counts, and the units."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent
SCRIPT = BENCHMARKS / "bench_eval.py"
DEFAULT_OUTPUT = BENCHMARKS / "results" / "bench_eval.json"
# The driver's order is the measuring order: one side after the other, like for like first.
SIDES = ("ours", "peer", "peer-inprocess")
SIDE_KEYS = {"ours": "ours", "peer": "peer", "peer-inprocess": "peer_inprocess"}
CHILD_TIMEOUT_S = 900.0
# Every timed figure and its unit, in the order a merged result lists them; a side keeps
# each figure's samples, and the rounds' samples are pooled.
SECTION_UNITS = {
    "warm_eval": "us",
    "host_call": "us",
    "host_call_await": "us",
    "await_eval": "us",
    "new_code_await": "us",
    "new_code_plain": "us",
    "big_result": "ms",
    "cold_start": "ms",
    "cold_start_back_to_back": "ms",
    "cold_start_off": "ms",
    "warm_eval_unmonitored": "us",
    "warm_eval_async": "us",
    "host_call_async": "us",
    "pool_checkout": "us",
    "pool_first_eval": "us",
    "pool_first_eval_setup": "us",
    "pool_first_eval_plain": "us",
    "two_mb_to_host": "ms",
    "two_mb_to_guest": "ms",
    "pool_throughput": "us",
    "code_mode": "ms",
    "deno_floor": "ms",
    "deno_floor_jitless": "ms",
    "deno_floor_inspector": "ms",
    "deno_floor_worker_flags": "ms",
    "deno_floor_worker_code": "ms",
    "deno_floor_first_byte": "ms",
    "big_result_build": "ms",
    "big_result_decode": "ms",
    "big_result_floor": "ms",
    "wake_floor": "us",
    "echo_floor": "us",
}
TIMED_SECTIONS = tuple(SECTION_UNITS)

WARM_CODE = "1+1"
HOST_CALL_CODE = "add(1, 2)"
# The forms users write: the README teaches a host call with await, and agents and Code Mode
# always use it. The peer's eval has no top-level await, so its side has no such figure: ours
# are held against its plain forms, which is never the flattering choice.
HOST_CALL_AWAIT_CODE = "await add(1, 2)"
AWAIT_CODE = "await Promise.resolve(2)"
# A short program as an agent writes one, new at every eval ({i} changes): with await, which
# the worker rewrites, and the same without, which it evaluates as a script.
NEW_CODE = (
    "var items = AWAIT[{id: 1, price: 3.5}, {id: 2, price: 7}];\n"
    "var total = 0;\n"
    "for (const item of items) {\n"
    "  if (item.price > 5) {\n"
    "    total += item.price * 2;\n"
    "  } else {\n"
    "    total += item.price;\n"
    "  }\n"
    "}\n"
    "var summary = { count: items.length, total: total.toFixed(2), tag: 'run-{i}' };\n"
    "summary.count\n"
)
NEW_CODE_AWAIT = NEW_CODE.replace("AWAIT", "await ")
NEW_CODE_PLAIN = NEW_CODE.replace("AWAIT", "")
BIG_LEN = 20_000
BIG_CODE = "Array.from({length: 20000}, (_, i) => ({id: i, name: 'x' + i}))"
# The same build, with only its length crossing: what the guest's own part of BIG_CODE costs.
BIG_BUILD_CODE = f"{BIG_CODE}.length"
# A 2 MB structured value (about 2.1 MB as JSON): 16,000 records of five fields.
TWO_MB_LEN = 16_000
TWO_MB_CODE = (
    "Array.from({length: 16000}, (_, i) => "
    "({id: i, name: 'item-' + i, tags: ['a', 'b', 'c'], score: i / 8, note: 'x'.repeat(64)}))"
)
# A host function returns a promise in our guest and its value in the peer's (whose eval
# neither awaits a returned promise nor allows top-level await).
TWO_MB_TO_GUEST_CODE = {
    "ours": "Promise.resolve(big()).then((v) => v.length + v[15999].tags.length)",
    "peer": "((v) => v.length + v[15999].tags.length)(big())",
}
# Code Mode: a program that makes three schema-validated tool calls and returns a 1,000-item
# result, through each side's structured-result API (ours: CodeMode.execute; the peer's:
# AgentSandbox.execute, whose tools are globals and whose program returns with `return`).
CODE_MODE_ITEMS = 1000
CODE_MODE_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
CODE_MODE_BODY = (
    "const a = await {p}count({{n: 1}}); const b = await {p}echo({{n: a}});"
    " const list = await {p}items({{n: 1000}}); {r}list.map((x) => ({{...x, b}}))"
)
CODE_MODE_CODE = {
    "ours": CODE_MODE_BODY.format(p="tools.", r=""),
    "peer": CODE_MODE_BODY.format(p="", r="return "),
}
POOL_SIZE = 2
# The pool's setup= figure (ours only): what each new worker is given before it can be
# checked out, and what the first eval then uses of it.
SETUP_MODULE = "export const twice = (x) => 2 * x;"
SETUP_CODE = "globalThis.base = 1"
# The peer's IsolatedRuntime kills the worker after 10,000 host calls by default.
PEER_DEFAULT_MAX_HOST_CALLS = 10_000
# Issue 20's density and oversubscription figures: this many workers alive at once, and as
# many runtimes driven at once (more than the machine has cores), and an idle pool's size.
DENSITY_WORKERS = 8
OVERSUBSCRIBED_RUNTIMES = 8
IDLE_POOL_SIZE = 4
# Before a memory or idle reading: the last start's CPU and V8's post-start work settle.
SETTLE_SECONDS = 0.5
# What the bare deno floor runs: an empty script, with the flags our worker passes that spare
# deno work an empty script does not need (looking for a config file and a lockfile).
DENO_FLOOR_ARGS = ("run", "--quiet", "--no-prompt", "--no-config", "--no-lock", "--no-remote", "--no-npm")
# How long the pool's first-eval samples wait once the pool is full (wait_pool_full).
POOL_IDLE_SECONDS = 0.05
# The wake floor's bare deno: each chunk read from stdin is written back, with blocking reads
# and writes, as a worker's read loop does once it has stopped polling.
# The warm eval's floor: each chunk read from a non-blocking stdin is written back, the read
# retried at once while there is none, so the echo never sleeps (as a warm worker polls).
SPIN_ECHO_SCRIPT = (
    "const core = Deno[Deno.internal].core;\n"
    "const buf = new Uint8Array(64);\n"
    "for (;;) {\n"
    "  let n;\n"
    "  try { n = core.readSync(0, buf); } catch { continue; }\n"
    "  if (n === 0) break;\n"
    "  core.writeSync(1, buf.subarray(0, n));\n"
    "}\n"
)
ECHO_SCRIPT = (
    "const buf = new Uint8Array(64);\n"
    "for (;;) {\n"
    "  const n = Deno.stdin.readSync(buf);\n"
    "  if (n === null) break;\n"
    "  Deno.stdout.writeSync(buf.subarray(0, n));\n"
    "}\n"
)


@dataclass(frozen=True, slots=True)
class Params:
    iterations: int
    warmup: int
    cold_runs: int
    big_runs: int
    # Untimed runs before the cold-start and big-result loops: the first spawn pays for
    # reading the binaries from disk, which is not what either side is being compared on.
    cold_warmup: int = 2
    big_warmup: int = 2
    # How long the oversubscribed runtimes are driven, and how long an idle worker or pool is
    # watched for the CPU it uses.
    window_s: float = 2.0
    idle_s: float = 3.0
    # The sections to run (the names sections.SECTIONS registers); empty: all of them.
    sections: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        return [
            *(["--sections", ",".join(self.sections)] if self.sections else []),
            "--iterations",
            str(self.iterations),
            "--warmup",
            str(self.warmup),
            "--cold-runs",
            str(self.cold_runs),
            "--big-runs",
            str(self.big_runs),
            "--cold-warmup",
            str(self.cold_warmup),
            "--big-warmup",
            str(self.big_warmup),
            "--window",
            str(self.window_s),
            "--idle-seconds",
            str(self.idle_s),
        ]


DEFAULT_PARAMS = Params(iterations=2000, warmup=200, cold_runs=15, big_runs=15)
QUICK_PARAMS = Params(
    iterations=500, warmup=100, cold_runs=5, big_runs=5, cold_warmup=1, big_warmup=1, window_s=0.5, idle_s=1.0
)
# Each round measures every side once with the parameters above.
DEFAULT_ROUNDS = 3
QUICK_ROUNDS = 1
