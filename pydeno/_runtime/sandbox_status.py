"""``sandbox_status()``: which OS layers a worker gets on this machine, checked on a real one.

The report is not a guess from kernel version numbers. It starts one real worker with
``sandbox="best_effort"`` (which applies every layer the kernel allows and says which it
skipped), reads from ``/proc`` what is really in force in that process (uid, capabilities,
``no_new_privs``, seccomp, its network namespace), takes the worker's own self-test result,
and checks that the monitor can read the worker's memory, CPU time and threads. From that it
says whether ``sandbox="require"`` would start here and, if not, the exact refusal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from .._base.errors import PydenoError
from .._base.failures import layer_refusal, selftest_refusal, unmeasurable_refusal
from ..host.process import cgroup, platform, supervisor

__all__ = ["LayerStatus", "SandboxStatus", "sandbox_status"]

State = Literal["applied", "missing", "not applicable"]
LAYERS = ("parent-death signal", "namespaces", "privilege drop", "no_new_privs", "landlock", "seccomp")


@dataclass(frozen=True, slots=True)
class LayerStatus:
    """One protection: ``name``, ``state`` ("applied", "missing", "not applicable") and why."""

    name: str
    state: State
    reason: str

    def __str__(self) -> str:
        return f"{self.name:<20} {self.state:<15} {self.reason}"


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    """The layers, the self-test and the resource monitor, as found on a real worker."""

    layers: tuple[LayerStatus, ...]
    # The message sandbox="require" refuses with here, or None if it starts.
    refusal: str | None

    @property
    def require_would_start(self) -> bool:
        return self.refusal is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "layers": [{"name": x.name, "state": x.state, "reason": x.reason} for x in self.layers],
            "require_would_start": self.require_would_start,
            "refusal": self.refusal,
        }

    def __str__(self) -> str:
        lines = [str(layer) for layer in self.layers]
        if self.refusal is None:
            lines.append("sandbox='require' would start here: every layer applies and the self-test passes")
        else:
            lines.append(f"sandbox='require' would refuse here: {self.refusal}")
        return "\n".join(lines)


def _verify(name: str, pid: int, status: dict[str, str]) -> str | None:
    """Why the layer is not in force in the running worker, or None if it is (or if /proc
    shows nothing about it: the parent-death signal and Landlock, which the self-test covers)."""
    if name == "privilege drop":
        uids = status.get("Uid", "").split()
        if "0" in uids or status.get("CapEff") != "0000000000000000":
            return f"the worker runs with uids {uids} and capabilities {status.get('CapEff')}"
    elif name == "no_new_privs" and status.get("NoNewPrivs") != "1":
        return "NoNewPrivs is not set in the worker"
    elif name == "seccomp" and status.get("Seccomp") != platform.SECCOMP_MODE_FILTER:
        return f"the worker's seccomp mode is {status.get('Seccomp')}, not a filter"
    elif name == "namespaces" and platform.network_namespace(pid) == platform.network_namespace():
        return "the worker shares the host's network namespace"
    return None


_APPLIED = {
    "parent-death signal": "the worker is killed if the host dies (PR_SET_PDEATHSIG, armed from a long-lived thread)",
    "namespaces": "private network (no interfaces up), IPC, UTS and mount namespaces",
    "privilege drop": "the worker runs as uid 65534 with no capabilities",
    "no_new_privs": "exec can never gain privileges",
    "landlock": "read-only access to deno, the worker and system libraries; nothing writable; no TCP",
    "seccomp": "kernel-attack syscalls, process creation, exec and signals to others refused",
}


def sandbox_status() -> SandboxStatus:
    """Start one worker with every layer this system allows and report what is in force.

    Takes about as long as starting a runtime. Never raises for a missing layer: that is what
    it reports. If no worker can be started at all, the refusal says why.
    """
    from ._sync import Runtime

    token = supervisor.quiet_sandbox_warnings.set(True)
    try:
        rt = Runtime(sandbox="best_effort", max_memory=64 * 2**20, max_threads=64, cpu_limit=60.0)
    except PydenoError as exc:
        return SandboxStatus((), f"no worker could be started: {exc}")
    finally:
        supervisor.quiet_sandbox_warnings.reset(token)
    try:
        return _report(rt)
    finally:
        rt.close()


def _report(rt: Any) -> SandboxStatus:
    process, hello, watch = rt._steps.worker_state()
    skipped = {line.partition(" is unavailable: ")[0]: line for line in process.sandbox_skipped()}
    status = platform.proc_status(process.pid)
    root = os.geteuid() == 0
    layers: list[LayerStatus] = []
    refusal: str | None = None
    for name in LAYERS:
        if name == "privilege drop" and not root:
            layers.append(LayerStatus(name, "not applicable", "the host does not run as root: nothing to drop"))
            continue
        if name in skipped:
            reason = skipped[name].partition(" is unavailable: ")[2]
            layers.append(LayerStatus(name, "missing", reason))
            refusal = refusal or layer_refusal(skipped[name])
            continue
        problem = _verify(name, process.pid, status)
        if problem is not None:
            layers.append(LayerStatus(name, "missing", problem))
            refusal = refusal or layer_refusal(f"{name} is unavailable: {problem}")
            continue
        layers.append(LayerStatus(name, "applied", _APPLIED[name]))
    breaches = process.selftest_breaches(hello.breaches)
    if breaches:
        layers.append(LayerStatus("self-test", "missing", "got through: " + "; ".join(breaches)))
        refusal = refusal or selftest_refusal(breaches)
    else:
        layers.append(
            LayerStatus(
                "self-test", "applied", "no file, write, network, process, environment or signal probe got through"
            )
        )
    unmeasurable = watch.unmeasurable_limits()
    if unmeasurable:
        layers.append(
            LayerStatus("resource monitor", "missing", f"cannot read the worker's usage for {', '.join(unmeasurable)}")
        )
        refusal = refusal or unmeasurable_refusal(unmeasurable[0])
    else:
        readable = "memory, CPU time and threads are readable (/proc and the CPU clock)"
        layers.append(LayerStatus("resource monitor", "applied", readable))
    layers.append(_kernel_limits(process))
    return SandboxStatus(tuple(layers), refusal)


def _kernel_limits(process: Any) -> LayerStatus:
    """Whether the kernel caps the worker's memory and tasks (its own cgroup), or the host's
    monitor alone does. Not a refusal either way: the monitor enforces every limit; the
    cgroup is what makes them hold while the host is too busy to sample."""
    name = "kernel limits"
    found = cgroup.mechanism()
    if process.cgroup is None:
        return LayerStatus(
            name,
            "missing",
            f"{found.describe()}; the zygote still caps a confined worker's memory and threads, sampling "
            "them from its own process, but workers under sandbox='off' are held only while the host's "
            "monitor runs",
        )
    return LayerStatus(
        name,
        "applied",
        f"memory and tasks capped by the worker's own cgroup v{found.version}, even while the host is busy",
    )
