"""The host's LLVM -mcpu is one whose code runs here, whatever the hypervisor hides.

Seen on an AMD EPYC Zen 4 VM (family 25, model 17) with AVX-512 masked: LLVM named it
`znver4` from its model number and every compiled kernel died of SIGILL. Both paths are
forced here (features present and hidden), so they are tested on any x86 machine."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dlas import registry
from dlas.runner.timing_groups import WorkerDied
from dlas.targets import host

x86_only = pytest.mark.skipif(not host.is_x86(host.detect_host_cpu()),
                              reason="x86 feature checks")


def flags_of(mcpu: str) -> list[str]:
    """The /proc/cpuinfo flags of a CPU that has exactly what LLVM's `mcpu` implies."""
    return sorted(host.X86_FEATURE_FLAGS[f] for f in host.llvm_cpu_features(mcpu)
                  if f in host.X86_FEATURE_FLAGS)


def pretend(monkeypatch: pytest.MonkeyPatch, llvm_says: str, flags: list[str]) -> None:
    monkeypatch.setattr(host, "_llvm_cpu", lambda: llvm_says)
    monkeypatch.setattr(host, "cpuinfo_fields", lambda: {"model name": "AMD EPYC",
                                                         "flags": " ".join(flags)})
    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")


@x86_only
def test_hidden_avx512_lowers_the_mcpu_to_one_the_cpu_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    masked = [f for f in flags_of("znver4") if not f.startswith("avx512") and f != "gfni"]
    pretend(monkeypatch, "znver4", masked)
    cpu = host.detect_host_cpu()
    assert cpu["mcpu"] == "znver3"
    assert "znver4" in cpu["mcpu_source"] and "avx512" in cpu["mcpu_source"]
    assert host.missing_features(cpu["mcpu"], cpu["flags"]) == []
    assert host.host_target(2)["mcpu"] == "znver3"


@x86_only
def test_a_cpu_with_every_feature_keeps_llvms_name(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, "znver4", flags_of("znver4"))
    cpu = host.detect_host_cpu()
    assert (cpu["mcpu"], cpu["mcpu_source"]) == ("znver4", "llvm")


@x86_only
def test_intel_and_flag_fallbacks_stay_runnable() -> None:
    avx2_only = flags_of("haswell")
    mcpu, lacking = host.runnable_mcpu("cascadelake", avx2_only)
    assert "avx512f" in lacking and host.missing_features(mcpu, avx2_only) == []
    assert mcpu in ("skylake", "broadwell", "haswell")
    # the /proc/cpuinfo fallback: a VNNI flag alone does not make a cascadelake
    assert host._mcpu_from_flags("x86_64", [*avx2_only, "avx512_vnni"]) == "haswell"
    assert host._mcpu_from_flags("x86_64", flags_of("cascadelake")) == "cascadelake"


@x86_only
def test_code_built_for_the_detected_cpu_runs_here() -> None:
    """In a child process: a SIGILL there is this test's failure, not pytest's death."""
    code = textwrap.dedent("""
        import numpy as np, tvm
        from tvm import te
        from dlas.targets.host import host_target
        a = te.placeholder((4096,), name="a")
        b = te.compute((4096,), lambda i: a[i] * a[i] + 1.0, name="b")
        lib = tvm.compile(tvm.IRModule({"main": te.create_prim_func([a, b])}),
                          target=tvm.target.Target(host_target(1)))
        x = tvm.runtime.tensor(np.full(4096, 2.0, "float32"))
        y = tvm.runtime.tensor(np.zeros(4096, "float32"))
        lib(x, y)
        assert float(y.numpy()[0]) == 5.0
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:],
                                  host.detect_host_cpu()["mcpu_source"])


@x86_only
@pytest.mark.parametrize("target", ["host", "llvm"])
def test_an_mcpu_this_cpu_cannot_run_is_compiled_but_not_measured(
        monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    registry.load_plugins()
    real = host.detect_host_cpu()
    no_avx512 = [f for f in real["flags"] if not f.startswith("avx512")]
    monkeypatch.setattr(host, "detect_host_cpu",
                        lambda: {**real, "flags": no_avx512, "mcpu": "haswell"})
    option = registry.get("targets", target)
    spec = option.fn(option.parse_params({"mcpu": "cascadelake"}))
    assert spec.tvm_target["mcpu"] == "cascadelake"
    assert spec.unmeasurable and "avx512f" in spec.unmeasurable
    assert "remote" in spec.unmeasurable and "leave mcpu out" in spec.unmeasurable
    runnable = option.fn(option.parse_params({"mcpu": "haswell"}))
    assert runnable.unmeasurable is None


def test_a_worker_killed_by_sigill_says_why() -> None:
    message = str(WorkerDied(-signal.SIGILL, "none / direct / none"))
    assert "illegal instruction" in message and "CPU feature" in message
    assert "illegal" not in str(WorkerDied(-signal.SIGKILL, None))


CPUINFO_DIR = host.SAVED_CPUS


@x86_only
@pytest.mark.parametrize(("saved", "mcpus"), [("zen3.txt", {"znver3"}),
                                              ("zen4-avx512-hidden.txt", {"znver3"}),
                                              ("zen1.txt", {"znver1", "znver2"})])
def test_a_saved_cpuinfo_picks_the_target_in_every_process_dlas_starts(
        monkeypatch: pytest.MonkeyPatch, saved: str, mcpus: set[str]) -> None:
    """DLAS_CPUINFO runs dlas as an AVX2 host would: the target, the core table and a
    child process (a timing worker or compile helper is one) all see the saved CPU."""
    monkeypatch.setenv(host.CPUINFO_ENV, str(CPUINFO_DIR / saved))
    if problem := host.cpuinfo_override_problem():  # a CPU with less than the saved one
        pytest.skip(problem)
    cpu = host.detect_host_cpu()
    assert not any(f.startswith("avx512") for f in cpu["flags"])
    assert cpu["mcpu"] in mcpus and not host.has_vnni(cpu)
    child = subprocess.run(
        [sys.executable, "-c", "from dlas.targets.host import host_target, detect_host_cpu\n"
         "from dlas.profile.host_facts import host_features\n"
         "print(host_target(2)['mcpu'], host_features().isa)"],
        capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    mcpu, isa = child.stdout.split()
    assert mcpu in mcpus and isa == "AVX2"


def test_a_missing_or_unusable_cpuinfo_override_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from dlas.cli import main

    monkeypatch.setenv(host.CPUINFO_ENV, str(tmp_path / "nothing.txt"))
    with pytest.raises(FileNotFoundError, match="DLAS_CPUINFO=.*no such file.*unset it"):
        host.cpuinfo_fields()
    assert main(["plugins"]) == 2
    (tmp_path / "empty.txt").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n")
    monkeypatch.setenv(host.CPUINFO_ENV, str(tmp_path / "empty.txt"))
    assert "no 'flags'" in (host.cpuinfo_override_problem() or "")
    assert main(["plugins"]) == 2
    more = "\n".join(line + " avx512f avx512_vnni amx_tile" if line.startswith("flags")
                     else line for line in (CPUINFO_DIR / "zen3.txt").read_text().splitlines())
    (tmp_path / "more.txt").write_text(more)
    monkeypatch.setenv(host.CPUINFO_ENV, str(tmp_path / "more.txt"))
    if "amx_tile" not in host.machine_cpuinfo_fields().get("flags", "").split():
        assert "illegal instruction" in (host.cpuinfo_override_problem() or "")
        assert "amx_tile" in (host.cpuinfo_override_problem() or "")
    monkeypatch.delenv(host.CPUINFO_ENV)
    assert host.cpuinfo_override_problem() is None


def test_a_saved_cpu_is_named_without_its_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocks dlas ships are package data, named by their stem, so a wheel install can
    run as a Zen 3 too; an unknown name lists the ones there are."""
    assert {"zen3", "zen1", "zen4-avx512-hidden"} <= set(host.saved_cpu_names())
    monkeypatch.setenv(host.CPUINFO_ENV, "zen3")
    assert host.cpuinfo_override() == host.SAVED_CPUS / "zen3.txt"
    assert host.cpuinfo_fields()["model"] == "1"
    monkeypatch.setenv(host.CPUINFO_ENV, "zen9")
    assert "zen1, zen3, zen4-avx512-hidden" in (host.cpuinfo_override_problem() or "")


def test_a_run_under_a_saved_cpu_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from dlas.cli import main
    from dlas.results.environment import capture_environment
    from dlas.sweep.config import load_config
    from dlas.sweep.grid import expand
    from dlas.targets.resolve import resolve_target

    config = Path(__file__).parents[1] / "configs" / "quickstart.yaml"
    monkeypatch.delenv(host.CPUINFO_ENV, raising=False)  # the plain run first
    point = expand(load_config(config))[0]
    native = (resolve_target(point).tvm_target["mcpu"], capture_environment()["cpu"]["mcpu"])
    monkeypatch.setenv(host.CPUINFO_ENV, "zen3")
    assert main(["plan", str(config), "--workspace", str(tmp_path / "ws")]) == 0
    # what this process resolved and recorded follows the setting, both ways
    assert resolve_target(point).tvm_target["mcpu"] == "znver3"
    assert capture_environment()["cpu"]["mcpu"] == "znver3"
    monkeypatch.delenv(host.CPUINFO_ENV)
    assert (resolve_target(point).tvm_target["mcpu"],
            capture_environment()["cpu"]["mcpu"]) == native
    assert "DLAS_CPUINFO=zen3: code paths follow that CPU's flags" in capsys.readouterr().err
