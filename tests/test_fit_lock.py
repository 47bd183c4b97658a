"""Two processes that need one artifact at once fit it once: the second waits for the first and loads
what it stored (leakshield.fit_lock)."""

import subprocess
import sys
import textwrap

WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path

    import torch

    from leakshield.artifacts import Artifact, ArtifactCache, FitKey

    root, role, flags = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    key = FitKey("defense:slow", {"n": 1}, "public", "data", 0)

    def wait_for(name):
        while not (flags / name).exists():
            time.sleep(0.01)

    def fit():
        with open(flags / "fits", "a") as log:
            log.write(role + "\\n")
        if role == "first":  # still fitting when the second asks for the artifact
            (flags / "first-fitting").touch()
            wait_for("second-asking")
            time.sleep(0.5)
        return Artifact(tensors={"w": torch.ones(1)}, metadata={"by": role})

    if role == "second":
        wait_for("first-fitting")
        (flags / "second-asking").touch()
    print(ArtifactCache(root).get_or_fit(key, fit).metadata["by"])
    """
)


def test_two_processes_needing_one_artifact_fit_it_once(tmp_path):
    script, flags = tmp_path / "worker.py", tmp_path / "flags"
    script.write_text(WORKER)
    flags.mkdir()
    runs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "cache"), role, str(flags)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in ("first", "second")
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert (flags / "fits").read_text().split() == ["first"]  # one fit, not two
    assert [out.strip() for out, _ in outputs] == ["first", "first"]  # the second loaded the first's
    assert "waiting for another process fitting defense:slow" in outputs[1][1]
