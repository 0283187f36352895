"""Every command block of README.md and docs/*.md runs as written, or says why it cannot here
(issue 29 item 1: "every README and docs command exits as documented").

A block is a fenced block (```` ```bash ````, ``sh``, ``shell``, ``console``: ``$ `` lines are the
commands, the others their output) or an indented (4 spaces) block. A fenced block with another
language (``text``, ``yaml``, ``ini`` ...) is not a command block. Each command block is, by
its first line (:func:`block_key`), exactly one of:

- a tour block (``<!-- tour -->``): ``tests/test_readme_tour.py`` runs it;
- in :data:`RUN`: run here in its scene, top to bottom in one ``bash`` per scene on a fresh
  home (``HOME`` a new directory, no ``GPUFLEET_*`` setting but the scene's), after the
  scene's :data:`PRELUDES` (the state the blocks speak of), with the files a reader brings
  (:data:`FILES`) in the working directory, next to the real components the blocks talk to:

  - ``lab``: the simulated lab with its Redfish BMC emulator; kmock as the Kubernetes API
    server (``GPUFLEET_KUBECONFIG``, ``GPUFLEET_SYNC_TARGETS=k8s``); ``gpufleet serve``
    started by the README's own line (its port ``8080`` becomes a free one);
  - ``ssh``: real sshd hosts enrolled from a site inventory, the real ``ansible-inventory``,
    ``ansible`` and ``ansible-playbook`` with the README's ``ansible.cfg``;
  - ``slurm``: a real Slurm cluster (slurmctld, one slurmd per node) made from
    ``gpufleet slurm export``;
- in :data:`NOT_RUN`, with the reason it cannot run here (and where it is tested instead).

A block that is none of them fails the test, and so does a listed block that no longer exists.
Each command must end with the status the docs give it: 0, unless a comment on it starts
``exit N``. A command is one line, or more: a line ending in ``\\`` continues, and so does an
unfinished compound command (``if ... fi``). It runs under ``set -e`` in a subshell; variable
assignments and ``... &`` run in the shell itself, so they carry over.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from tests.export.test_k8s_sync import Kmock, _node
from tests.slurmlab import SlurmLab, SlurmLabError, ensure_slurm
from tests.sshlab_fixtures import SshLabFactory
from tests.test_readme_tour import _comment_start  # one reading of a shell comment

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOUR = "<!-- tour -->"
SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
_EXIT = re.compile(r"^exit (\d+)\b")
_SHELL_VAR = re.compile(r"^\s*(export\s+)?[A-Za-z_][A-Za-z0-9_]*=\S*\s*$|^[A-Z_]+=\$\(")

# Blocks run here (by :func:`block_key`) -> their scene (:data:`PRELUDES`), in the docs' order.
RUN = {
    "README.md: gpufleet baseline create h100-mig --from-host gpu-13 --mig-config "
    "mig-parted.yaml:all-balanced \\": "lab",
    "README.md: gpufleet capacity --k8s": "lab",
    "README.md: if ! gpufleet capacity check --gpus 16 --model H100 --profile inference "
    "--headroom 10% --json > capacity.json; then": "lab",
    "README.md: gpufleet inventory script ./gpufleet-inventory": "ssh",
    "README.md: ansible -i ./gpufleet-inventory gpu_a100 -m ping": "ssh",
    "README.md: gpufleet k8s sync --dry-run": "lab",
    "README.md: gpufleet sync --once": "lab",
    "README.md: gpufleet maintenance on gpu-07 --reason \"PSU\" --drain-timeout 1h": "slurm",
    "README.md: TOKEN=$(openssl rand -hex 24)": "lab",
    "README.md: gpufleet bmc status 'rack:r02' --json": "lab",
    "README.md: gpufleet reimage gpu-07 --baseline a100-2026q4 --yes": "lab",
}

# Blocks not run here, and why.
NOT_RUN = {
    "README.md: make demo": "`make demo` rebuilds the checkout's own .venv and .gpufleet-demo "
    "(tests/lab/test_demo.py runs its `lab demo`); `make test` is the whole suite, this test "
    "included",
    "README.md: stage('GPU capacity') {": "a Jenkinsfile stage, not shell (examples/Jenkinsfile)",
    "README.md: [defaults]": "an ansible.cfg file, not commands: the ssh scene uses it as "
    "written, and test_the_documented_ansible_cfg_reads_as_meant checks what Ansible reads",
    "README.md: ansible-playbook -i ./gpufleet-inventory -l state_enrolled \\":
    "changes the machine it runs on (accounts, hostname, sshd, chrony); "
    "tests/e2e/test_init_role.py runs the role against real sshd hosts",
    "README.md: #!/bin/sh": "a Slurm prolog file for a GPU node, not commands to paste "
    "(tests/service/test_preflight.py judges captured nodes)",
}

# The files a reader of the blocks brings: in the working directory.
FILES = {
    # a mig-parted config (NVIDIA's format); gpufleet reads `devices: all` layouts
    # the site's own playbook: says what it would install, on each host it is given
    "driver.yml": """\
---
- name: NVIDIA driver at the pool baseline
  hosts: all
  gather_facts: false
  tasks:
    - name: Show the driver the baseline asks for
      ansible.builtin.command: "echo {{ inventory_hostname }} driver {{ gpu_driver_version }}"
      changed_when: false
""",
    "mig-parted.yaml": """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
""",
}

# The state each scene's blocks speak of. ``lab``: the tour's lab, collected and validated,
# with its baseline, whose OS image an HTTP server serves (the BMCs' virtual media fetch it).
# ``slurm``: a job running on gpu-07. ``ssh``: the site inventory of the test's sshd hosts
# (``hosts.ini``).
PRELUDES = {
    "lab": """\
gpufleet lab create --hosts 32 --bmc
gpufleet enroll -i ~/.local/share/gpufleet/lab/inventory.ini
gpufleet collect                # exit 1: gpu-03, gpu-27
gpufleet validate               # exit 1
python3 -m http.server --bind 127.0.0.1 {image_port} --directory images &
until curl -s -o /dev/null http://127.0.0.1:{image_port}/; do sleep 0.2; done
gpufleet baseline create a100-2026q4 --from-host gpu-01 --pool train-a100 --status validated \\
    --os-image-url http://127.0.0.1:{image_port}/ubuntu-22.04-gpu.iso
""",
    "slurm": """\
sbatch -w gpu-07 -t 1 --gres=gpu:h100:2 --wrap 'sleep 6'
until squeue -h -w gpu-07 -t R | grep -q .; do sleep 0.2; done
""",
    "ssh": """\
gpufleet enroll -i hosts.ini
gpufleet collect
gpufleet validate
gpufleet baseline create a100-2026q4 --from-host gpu-01 --pool train-a100 --status validated
""",
}

# What the test looks at after a scene's blocks (with :data:`EXPECT`).
AFTER = {
    "slurm": """\
gpufleet events gpu-07
sinfo -h -n gpu-07 -o %T
""",
}

# Commands that loop until stopped: run for that many seconds, then SIGTERM (the docs say it
# finishes the round and exits 0).
LOOPS = {"gpufleet sync --every 1m": 5}

# What some commands must print (a command that exits 0 with an error body would pass).
EXPECT = {
    "ansible-inventory -i ./gpufleet-inventory --graph": "@pool_train_a100:",
    "gpu_a100 -m ping": '"ping": "pong"',
    "driver.yml": "ok=1",
    "gpufleet events gpu-07": "slurm drain before maintenance",
    "sinfo -h -n gpu-07 -o %T": "drained",
    "--slurm --partition gpu": "Slurm: ",
    "gpufleet reimage gpu-07": "reimage done",
    "/api/v1/hosts?model=H100": '"items"',
    "/api/v1/capacity/check": '"ok"',
    "gpufleet bmc status 'rack:r02' --json": '"power_state": "On"',
}


@dataclass(frozen=True)
class Block:
    path: str  # relative to the checkout
    lineno: int  # first line of the block's content
    lines: tuple[str, ...]  # as a reader pastes them (indent removed, `$ ` prompts only)
    tour: bool

    @property
    def key(self) -> str:
        return block_key(self)


def block_key(b: Block) -> str:
    first = next(line for line in b.lines if line.strip())
    cut = _comment_start(first)
    code = first if cut is None or cut == first.find("#!") else first[:cut]
    return f"{b.path}: {' '.join(code.split())}"


def code_blocks(path: Path) -> Iterator[Block]:
    """The command blocks of one Markdown file (see the module docstring)."""
    return code_blocks_of(path.read_text(), path.relative_to(ROOT).as_posix())


def code_blocks_of(text: str, rel: str = "X.md") -> Iterator[Block]:
    lines = text.splitlines()
    i = 0
    prev_blank = True
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            lang = line[3:].strip().split(" ")[0]
            tour = i > 0 and lines[i - 1].strip() == TOUR
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            body = lines[i + 1:j]
            if lang in SHELL_LANGS or not lang:
                if lang == "console":
                    body = [ln[2:] for ln in body if ln.startswith("$ ")]
                yield Block(rel, i + 2, tuple(body), tour)
            i, prev_blank = j + 1, False
            continue
        if prev_blank and line.startswith("    ") and line.strip():
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            while not lines[j - 1].strip():
                j -= 1
            yield Block(rel, i + 1, tuple(ln[4:] for ln in lines[i:j]), False)
            i, prev_blank = j, False
            continue
        prev_blank = not line.strip()
        i += 1


def all_blocks() -> list[Block]:
    return [b for p in DOCS for b in code_blocks(p)]


def _complete(text: str) -> bool:
    """Whether ``text`` is a whole shell command (not an open ``if``, quote or ``\\``)."""
    if text.rstrip().endswith("\\"):
        return False
    r = subprocess.run(["bash", "-n", "-c", text], capture_output=True, text=True)
    return "unexpected end of file" not in r.stderr


@dataclass(frozen=True)
class Command:
    block: Block
    lineno: int  # in the file
    text: str
    expected: int


def commands(block: Block) -> list[Command]:
    out: list[Command] = []
    pending: list[str] = []
    start, expected = 0, 0
    follows = False  # the line above ended a command: a comment-only line continues its comment
    for n, raw in enumerate(block.lines):
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            m = _EXIT.match(raw.strip().lstrip("#").strip())
            if follows and m and raw.strip():
                out[-1] = replace(out[-1], expected=int(m.group(1)))
            follows = follows and bool(raw.strip())
            continue
        if not pending:
            start, expected = block.lineno + n, 0
        cut = _comment_start(raw)
        if cut is not None and (m := _EXIT.match(raw[cut + 1:].strip())):
            expected = int(m.group(1))
        pending.append(raw)
        text = "\n".join(pending)
        follows = _complete(text)
        if follows:
            out.append(Command(block, start, text, expected))
            pending = []
    assert not pending, f"{block.path}:{start}: unfinished command {pending}"
    return out


def _classified(b: Block) -> str | None:
    if b.tour:
        return "tour"
    if b.key in RUN:
        return "run"
    if b.key in NOT_RUN:
        return "not run"
    return None


def test_every_command_block_is_run_or_says_why_not() -> None:
    blocks = all_blocks()
    keys = [b.key for b in blocks]
    assert len(keys) == len(set(keys)), "two blocks start alike: make their first lines differ"
    loose = [f"{b.path}:{b.lineno}: {b.key!r}" for b in blocks if _classified(b) is None]
    assert not loose, ("command blocks neither run (RUN) nor listed with a reason (NOT_RUN):\n"
                       + "\n".join(loose))
    gone = sorted((set(RUN) | set(NOT_RUN)) - set(keys))
    assert not gone, f"listed blocks no longer in the docs: {gone}"
    assert not set(RUN) & set(NOT_RUN)
    assert sum(b.tour for b in blocks) >= 2
    assert "README.md: gpufleet capacity --k8s" in RUN  # indented blocks are found


def test_commands_split_as_a_shell_reads_them() -> None:
    """Continuations, compound commands, ``exit N`` (also on the comment line below) and
    console prompts, the way :func:`commands` cuts a block."""
    block = Block("X.md", 10, (
        "a --x \\", "  --y            # exit 3: why", "b", "                  # exit 1: below",
        "", "# a comment", "if ! c; then", "  d; exit 1", "fi", "e  # 'exit 2' is not a status",
    ), False)
    got = [(c.lineno, c.text.split()[0], c.expected) for c in commands(block)]
    assert got == [(10, "a", 3), (12, "b", 1), (16, "if", 0), (19, "e", 0)]
    (console,) = list(code_blocks_of("```console\n$ gpufleet summary\n32 hosts\n```\n"))
    assert console.lines == ("gpufleet summary",)
    (indented,) = list(code_blocks_of("text\n\n    gpufleet drift\n\n    gpufleet x\nend\n"))
    assert indented.lines == ("gpufleet drift", "", "gpufleet x")
    assert not list(code_blocks_of("```yaml\na: 1\n```\n    not code after a fence\n"))


def test_every_make_target_the_docs_name_exists() -> None:
    """Inline ``make X`` in the docs (``make demo``, ``make wheelhouse`` ...) name real targets;
    the make commands in blocks are in :data:`NOT_RUN`, and tests/test_wheel.py runs
    ``make -n wheelhouse`` and the offline install."""
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
    named = {m for p in DOCS for m in re.findall(r"`make ([a-z][a-z-]*)", p.read_text())}
    assert {"demo", "test", "check", "bench", "wheelhouse"} <= named
    assert named <= targets, f"make targets the docs name but the Makefile lacks: {named - targets}"


def test_the_documented_ansible_cfg_reads_as_meant(tmp_path: Path) -> None:
    """The README's ``ansible.cfg``, written as shown, gives Ansible what it says."""
    (block,) = [b for b in all_blocks() if b.key == "README.md: [defaults]"]
    (tmp_path / "ansible.cfg").write_text("\n".join(block.lines) + "\n")
    (tmp_path / "gpufleet-inventory").write_text("#!/bin/sh\necho '{}'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    r = subprocess.run([str(Path(sys.executable).parent / "ansible-config"), "dump",
                        "--only-changed", "-t", "all"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, check=True)
    changed = r.stdout
    assert re.search(r"HOST_KEY_CHECKING\(.*\) = False", changed), changed
    assert re.search(r"ANSIBLE_PIPELINING\(.*\) = True", changed), changed
    assert re.search(r"DEFAULT_HOST_LIST\(.*\) = .*gpufleet-inventory", changed), changed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    venv_bin = str(Path(sys.executable).parent)
    env |= {"HOME": str(home), "PATH": f"{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}",
            "COLUMNS": "100", "TZ": "UTC", "LC_ALL": "C.UTF-8"}
    env.pop("VIRTUAL_ENV", None)
    return env


def _script(cmds: list[Command], port: int, status: Path) -> str:
    """One bash: each command in a subshell under ``set -e`` (assignments and ``&`` in the
    shell itself), its status to fd 3 so the commands' output cannot fake one."""
    out = [f"exec 3>{shlex.quote(str(status))}", 'echo "- 0 $(date +%s.%N)" >&3']
    for n, c in enumerate(cmds):
        text = c.text.replace("8080", str(port))
        out.append(f"printf '\\n@@cmd {n}\\n'")  # on a line of its own
        code = text if _comment_start(text) is None else text[:_comment_start(text)]
        if code.rstrip().endswith("&"):
            out.append(text)
            if "gpufleet serve" in text:  # as a reader waits for "Uvicorn running on ..."
                out.append(f"for _ in $(seq 300); do curl -s -o /dev/null "
                           f"http://127.0.0.1:{port}/ && break; sleep 0.2; done")
        elif loop := next((s for w, s in LOOPS.items() if w in text), None):
            out.append(f"( {code} & pid=$!; sleep {loop}; kill -TERM $pid; wait $pid )")
        elif _SHELL_VAR.match(text):
            out.append(text)
        else:
            out.append(f"( set -e\n{text}\n)")
        out.append(f'echo "{n} $? $(date +%s.%N)" >&3')
    out.append("kill $(jobs -p) 2>/dev/null; wait")
    return "\n".join(out)


def _per_cmd(output: str) -> dict[int, str]:
    out: dict[int, str] = {}
    n = -1
    for line in output.splitlines(keepends=True):
        if line.startswith("@@cmd "):
            n = int(line.split()[1])
            continue
        out[n] = out.get(n, "") + line
    return out


def _run_scene(scene: str, env: dict[str, str], work: Path, status: Path) -> None:
    """Run the scene's prelude and its blocks in one bash in ``work``; assert each exit."""
    for name, text in FILES.items():
        (work / name).write_text(text)
    text = PRELUDES[scene].replace("{image_port}", str(_free_port()))
    prelude = Block(f"PRELUDE[{scene}]", 1, tuple(text.splitlines()), False)
    after = Block(f"AFTER[{scene}]", 1, tuple(AFTER.get(scene, "").splitlines()), False)
    cmds = commands(prelude) + [c for b in all_blocks() if RUN.get(b.key) == scene
                                for c in commands(b)] + commands(after)
    started = time.monotonic()
    with subprocess.Popen(["bash", "-c", _script(cmds, _free_port(), status)], env=env,
                          cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as proc:
        try:
            output, _ = proc.communicate(timeout=400)
        finally:  # a background `gpufleet serve` left by a killed run goes with its group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    print(f"{scene}: {len(cmds)} commands took {time.monotonic() - started:.0f} s")
    marks = [line.split() for line in status.read_text().splitlines()]
    got = {n: rc for n, rc, _ in marks}
    spent = sorted(((float(b[2]) - float(a[2]), b[0]) for a, b in itertools.pairwise(marks)),
                   reverse=True)
    print("slowest:", ", ".join(f"{cmds[int(n)].text[:40]} {s:.1f}s" for s, n in spent[:6]))
    logs = _per_cmd(output)
    if show := os.environ.get("DOCS_SHOW"):  # DOCS_SHOW=k8s: what those commands printed
        for n, c in enumerate(cmds):
            if show in c.text:
                print(f"$ {c.text}\n{logs.get(n, '')}")
    wrong = [
        f"{c.block.path}:{c.lineno}: `{c.text}` exited {got.get(str(n), 'never (not run)')}, "
        f"documented {c.expected}\n{logs.get(n, '')[-1500:]}"
        for n, c in enumerate(cmds) if got.get(str(n)) != str(c.expected)
    ]
    assert not wrong, "\n".join(wrong)
    for n, c in enumerate(cmds):
        for what, shown in EXPECT.items():
            if what in c.text:
                assert shown in logs.get(n, ""), f"`{c.text}` printed:\n{logs.get(n, '')}"


@pytest.mark.long
def test_the_lab_blocks_run_as_written(tmp_path: Path) -> None:
    """The blocks of scene ``lab``: the simulated lab with its BMC emulator, kmock as the
    cluster, ``gpufleet serve``."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "images").mkdir()  # the OS image the lab's BMCs boot (served over HTTP)
    (work / "images" / "ubuntu-22.04-gpu.iso").write_bytes(bytes(65536))
    cluster = Kmock([_node(f"gpu-{i:02d}", "8") for i in range(1, 33)])
    env = _env(home) | {"GPUFLEET_KUBECONFIG": str(cluster.kubeconfig(tmp_path / "kubeconfig")),
                        "GPUFLEET_SYNC_TARGETS": "k8s"}
    lab = home / ".local" / "share" / "gpufleet" / "lab"
    try:
        _run_scene("lab", env, work, tmp_path / "status")
    finally:
        cluster.close()
        if lab.exists():
            from gpufleet.lab.bmc import stop_bmc

            stop_bmc(lab)
    assert (work / "apply-labels.sh").read_text().startswith("#!")


@pytest.mark.long
@pytest.mark.sshlab
def test_the_ansible_blocks_run_against_sshd_hosts(
    sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """The blocks of scene ``ssh``: a site inventory of real sshd hosts (lab facts: A100s in
    pool ``train-a100``) enrolled and validated, then the real ``ansible`` and
    ``ansible-playbook`` over the dynamic inventory, with the README's ``ansible.cfg``."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    lab = sshlab_factory()
    gpus = create_fleet(2, models=["a100-8x"], faults={})
    targets = [lab.add_host(h.name, render_sections(h)) for h in gpus.hosts]
    lab.start()
    (work / "hosts.ini").write_text("\n".join([
        "[gpu_a100]",
        *(f"{t.name} ansible_host={t.address} ansible_port={t.port}" for t in targets),
        "[gpu_a100:vars]",
        "gpufleet_pool=train-a100",
        "[all:vars]",
        f"ansible_user={lab.user}",
        f"ansible_ssh_private_key_file={lab.client_key}",
        "ansible_python_interpreter=/usr/bin/python3",
        "",
    ]))
    (cfg,) = [b for b in all_blocks() if b.key == "README.md: [defaults]"]
    (work / "ansible.cfg").write_text("\n".join(cfg.lines) + "\n")
    env = {k: v for k, v in _env(home).items() if not k.startswith("ANSIBLE_")} | {
        # the lab login's PATH has the fake GPU tools and a few basics; no known_hosts
        "ANSIBLE_REMOTE_TMP": "/tmp/.ansible-gpufleetlab",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_GATHERING": "explicit",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o ControlPersist=no "
                            "-o UserKnownHostsFile=/dev/null",
    }
    _run_scene("ssh", env, work, tmp_path / "status")


@pytest.mark.long
def test_the_slurm_blocks_run_against_a_slurm_cluster(tmp_path: Path) -> None:
    """The blocks of scene ``slurm``: a real Slurm cluster (tests/slurmlab.py) whose nodes are
    ``gpufleet slurm export`` of an 8-host H100 lab, validated; ``SLURM_CONF`` set as on a
    login node, ``GPUFLEET_SYNC_TARGETS=slurm`` as the README says. A job runs on gpu-07 when
    the blocks start."""
    try:
        ensure_slurm()
    except SlurmLabError as exc:
        pytest.fail(f"slurm lab unavailable: {exc}")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    root = Path(tempfile.mkdtemp(prefix="gpufleet-docs-slurm-"))  # short: munge's socket path
    slurm = SlurmLab(root / "slurm")
    env = _env(home) | {"SLURM_CONF": str(slurm.conf), "GPUFLEET_SYNC_TARGETS": "slurm"}
    lab = home / ".local" / "share" / "gpufleet" / "lab"
    for cmd in (["lab", "create", "--hosts", "8", "--model", "h100-8x", "--no-default-faults"],
                ["enroll", "-i", str(lab / "inventory.ini")], ["validate"],
                ["slurm", "export", "--out", str(root / "export"),
                 "--gpu-files", str(root / "slurm" / "dev" / "{node}" / "nvidia[{minors}]")]):
        subprocess.run(["gpufleet", *cmd], env=env, cwd=work, check=True, capture_output=True)
    conf = (root / "export" / "slurm.conf").read_text().splitlines()
    try:
        slurm.start([ln for ln in conf if ln.startswith("NodeName=")],
                    (root / "export" / "gres.conf").read_text())
        _run_scene("slurm", env, work, tmp_path / "status")
    finally:
        slurm.stop()
        shutil.rmtree(root, ignore_errors=True)
