"""The Python distribution and the repository's hygiene: the name nobody else holds on PyPI, the
LICENSE, one version, a wheel and sdist that install into a clean venv with their types, their
command and Spark's discovery; the bootstrap's install that mypy can follow; pg_config instead of
hard-coded server paths; the lint hook and its pins; benchmark results that are not committed."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import pgqueue
from conftest import REPO, Server, admin_execute, create_database, drop_database

DIST = "pgqueue-sql"
VENV_BIN = Path(sys.executable).parent
WRONG_USE = 'from pgqueue import Queue\n\nqueue: int = Queue("dbname=app", "jobs")\n'


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload,no-any-return]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that points Python or libpq somewhere."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PG", "PYTHON", "VIRTUAL_ENV")) and k != "PGQUEUE_DSN"}
    env.update(extra)
    return env


# -- the distribution installed by the bootstrap ----------------------------------------------


def test_distribution_name_version_and_license() -> None:
    assert md.packages_distributions()["pgqueue"] == [DIST]  # not the unrelated PyPI `pgqueue`
    meta = md.metadata(DIST)
    assert meta["Version"] == pgqueue.__version__ == "0.4.0"
    assert meta["License-Expression"] == "PostgreSQL"
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("PostgreSQL License") and "Copyright (c) 2026, The pgqueue developers" in text
    assert (REPO / "python" / "LICENSE").resolve() == (REPO / "LICENSE").resolve()
    # the version is written once: in pgqueue/_version.py, which pyproject.toml reads
    pyproject = (REPO / "python" / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "pgqueue._version.__version__" in pyproject
    assert not re.search(r"^version\s*=\s*\"", pyproject, re.M)  # no literal version here


def test_the_bootstrap_install_is_visible_to_mypy_and_to_spark_discovery(tmp_path: Path) -> None:
    """The default editable install hides the package behind an import hook that neither mypy
    nor pkgutil.iter_modules (PySpark's data-source lookup) follows."""
    (tmp_path / "use.py").write_text(WRONG_USE)
    proc = run([str(VENV_BIN / "mypy"), "--no-incremental", "use.py"], cwd=tmp_path, env=clean_env())
    assert proc.returncode == 1 and 'expression has type "Queue"' in proc.stdout, proc.stdout + proc.stderr
    probe = "import pkgutil; print(sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')))"
    proc = run([sys.executable, "-c", probe], cwd=tmp_path, env=clean_env())
    assert "pyspark_pgqueue" in proc.stdout, proc.stdout + proc.stderr


def test_pyspark_finds_the_format_without_register(tmp_path: Path) -> None:
    """Run PySpark's own lookup of Python data sources (what `spark.read.format("pgqueue")` calls on
    a name it does not know) and read the names it reports to the JVM."""
    try:  # (fail, never skip, as every Spark test: the README's test command installs it)
        import pyspark  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"this test needs pyspark ({exc}): pip install -r python/requirements-spark.txt")
    script = (
        "import io\n"
        "from pyspark.serializers import read_int\n"
        "from pyspark.sql.worker import lookup_data_sources as lookup\n"
        "out = io.BytesIO()\n"
        "lookup._main(io.BytesIO(), out)\n"
        "out.seek(0)\n"
        "for _ in range(read_int(out)):\n"
        "    print(out.read(read_int(out)).decode())\n"
        "    out.read(read_int(out))\n"
    )
    proc = run([sys.executable, "-c", script], cwd=tmp_path, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "pgqueue" in proc.stdout.split(), proc.stdout


# -- repository hygiene --------------------------------------------------------------------------


def _tracked(*paths: str) -> list[Path]:
    out = run(["git", "ls-files", "-z", *paths], cwd=REPO)
    assert out.returncode == 0, out.stderr
    return [REPO / p for p in out.stdout.split("\0") if p]


def test_server_paths_come_from_pg_config() -> None:
    pattern = re.compile("/usr/lib/" + r"postgresql/\d")
    offenders = [str(p.relative_to(REPO)) for p in _tracked("scripts", "tests", "bench", "python", "examples")
                 if p.is_file() and p.suffix not in (".png", ".json") and pattern.search(p.read_text(errors="replace"))]
    assert offenders == []


def test_find_pg_config(tmp_path: Path) -> None:
    finder = str(REPO / "scripts" / "find-pg-config")
    found = run([finder]).stdout.strip()
    bindir = run([found, "--bindir"]).stdout.strip()
    assert (Path(bindir) / "postgres").exists(), (found, bindir)
    assert run([finder], env={**os.environ, "PG_CONFIG": "/opt/pg/bin/pg_config"}).stdout.strip() == "/opt/pg/bin/pg_config"
    # no pg_config on PATH (a client-only machine has one whose bindir has no server): Debian's layout
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("sh", "ls", "sort", "tail"):
        (tools / tool).symlink_to(shutil.which(tool) or tool)
    proc = run([finder], env={"PATH": str(tools)})
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_config"),
                    key=lambda p: [int(x) for x in re.findall(r"\d+", p.parts[-3])])
    if debian:
        assert proc.stdout.strip() == str(debian[-1])
    else:
        assert proc.returncode == 1 and "PG_CONFIG" in proc.stderr


def _pinned(name: str) -> str:
    found = re.search(rf"^{re.escape(name)}==(\S+)$", (REPO / "python" / "requirements-dev.txt").read_text(), re.M | re.I)
    assert found, name
    return found.group(1)


def test_pre_commit_runs_the_pinned_ruff_offline_in_the_test_command() -> None:
    """One ruff for commits and the test command: the hook is local (nothing to fetch from a hook
    repository) and runs .venv's ruff, whose version is the pin; scripts/test.sh runs the hooks."""
    import yaml

    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    hooks = {hook["id"]: hook for hook in config["repos"][0]["hooks"]}
    ruff = hooks["ruff-check"]
    assert ruff["language"] == "system"
    assert ruff["entry"].split()[:4] == [".venv/bin/ruff", "check", "--config", "python/pyproject.toml"]
    assert run([str(REPO / ".venv" / "bin" / "ruff"), "--version"]).stdout.split() == ["ruff", _pinned("ruff")]
    assert md.version("pre-commit") == _pinned("pre-commit")
    test_sh = (REPO / "scripts" / "test.sh").read_text()
    assert re.search(r"^\.venv/bin/pre-commit run --all-files$", test_sh, re.M)
    assert ".venv/bin/ruff" not in test_sh  # the hook is the test command's one lint step


def test_the_pre_commit_hook_finds_a_lint_error(tmp_path: Path) -> None:
    """The hook really lints: in a throwaway repository with this config, a file with an unused
    import fails `pre-commit run --all-files`, and passes once fixed."""
    repo = tmp_path / "repo"
    (repo / "python").mkdir(parents=True)
    shutil.copy(REPO / ".pre-commit-config.yaml", repo / ".pre-commit-config.yaml")
    shutil.copy(REPO / "python" / "pyproject.toml", repo / "python" / "pyproject.toml")
    (repo / ".venv").symlink_to(REPO / ".venv")
    (repo / "python" / "bad.py").write_text("import os\n")
    env = {**clean_env(), "PRE_COMMIT_HOME": str(tmp_path / "cache"), "GIT_CONFIG_GLOBAL": os.devnull}
    for argv in (["git", "init", "-q"], ["git", "add", "."]):
        assert run(argv, cwd=repo, env=env).returncode == 0
    precommit = [str(VENV_BIN / "pre-commit"), "run", "--all-files"]
    proc = run(precommit, cwd=repo, env=env)
    assert proc.returncode == 1 and "F401" in proc.stdout and "python/bad.py" in proc.stdout, proc.stdout + proc.stderr
    (repo / "python" / "bad.py").write_text("import os\n\nprint(os.sep)\n")
    proc = run(precommit, cwd=repo, env=env)
    assert proc.returncode == 0 and "Passed" in proc.stdout, proc.stdout + proc.stderr


def test_benchmark_results_are_not_committed() -> None:
    assert _tracked("bench/results/benchmarks.json") == []
    assert run(["git", "check-ignore", "-q", "bench/results/benchmarks.json"], cwd=REPO).returncode == 0
    assert _tracked("docs/benchmarks.md") and _tracked("docs/img")


# -- python -m build, then a clean venv ---------------------------------------------------------


@pytest.mark.build
def test_wheel_and_sdist_install_into_a_clean_venv(tmp_path: Path, dsn: str, pg_server: Server) -> None:
    # build from a copy, so that the build's egg-info and build/ do not land in the shared tree
    src = tmp_path / "src"
    shutil.copytree(REPO / "python", src / "python", symlinks=True,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copy(REPO / "LICENSE", src / "LICENSE")
    dist = tmp_path / "dist"
    # --no-isolation: the backend is the pinned setuptools of the test venv, no download
    proc = run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src / "python")])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheel = next(dist.glob("pgqueue_sql-0.4.0-py3-none-any.whl"))
    sdist = next(dist.glob("pgqueue_sql-0.4.0.tar.gz"))

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "pgqueue/py.typed" in names and "pyspark_pgqueue/__init__.py" in names
        # the dashboard's templates and assets: it must work offline, from the wheel alone
        assert {"pgqueue/dashboard/templates/base.html", "pgqueue/dashboard/static/dashboard.js",
                "pgqueue/dashboard/static/dashboard.css"} <= set(names)
        assert "pgqueue_sql-0.4.0.dist-info/licenses/LICENSE" in names
        assert not [n for n in names if n.startswith(("bench/", "tests/")) or n.endswith("spark/bench.py")]
    with tarfile.open(sdist) as tf:
        member = tf.getmember("pgqueue_sql-0.4.0/LICENSE")
        assert member.isfile()  # the file itself, not the repository's symbolic link
        license_file = tf.extractfile(member)
        assert license_file is not None and b"The pgqueue developers" in license_file.read()

    venv = tmp_path / "venv"
    proc = run([sys.executable, "-m", "venv", str(venv)])
    assert proc.returncode == 0, proc.stderr
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # the wheel with its dependencies, at the versions the test venv pins; mypy to read its types
    proc = run([*pip, str(wheel), "psycopg-binary", "mypy", "-c", str(REPO / "python" / "requirements-dev.txt")],
               env=clean_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    python, env = str(venv / "bin" / "python"), clean_env()

    proc = run([python, "-c", "import pgqueue; print(pgqueue.__version__, pgqueue.__file__)"],
               cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    version, where = proc.stdout.split()
    assert version == "0.4.0" and where.startswith(str(venv)), proc.stdout

    metadata = ("import importlib.metadata as md, json, pkgutil; d = md.distribution('pgqueue-sql'); "
                "print(json.dumps([d.metadata['Name'], d.metadata['License-Expression'], "
                "sorted(str(f) for f in d.files or []), "
                "sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_'))]))")
    proc = run([python, "-c", metadata], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr

    name, license_expr, files, spark_modules = json.loads(proc.stdout)
    assert (name, license_expr) == (DIST, "PostgreSQL")
    assert "pgqueue/py.typed" in files
    assert "pgqueue/embedded.py" in files  # the demo's throwaway server, usable with the embedded extra
    assert not [f for f in files if f.startswith("bench/") or f.endswith("spark/bench.py")]
    # PySpark 4 registers every top-level `pyspark_*` module's DefaultSource (pkgutil.iter_modules)
    assert spark_modules == ["pyspark_pgqueue"]

    (tmp_path / "use.py").write_text(WRONG_USE)
    proc = run([str(venv / "bin" / "mypy"), "--strict", "--no-incremental", "use.py"], cwd=tmp_path, env=env)
    assert proc.returncode == 1 and 'expression has type "Queue"' in proc.stdout, proc.stdout + proc.stderr
    assert "import-untyped" not in proc.stdout and "import-not-found" not in proc.stdout

    pgq = str(venv / "bin" / "pgqueue")
    proc = run([pgq, "--version"], cwd=tmp_path, env={**env, "PGQUEUE_DSN": dsn})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "pgqueue 0.4.0 (pgqueue-sql)"
    assert proc.stdout.splitlines()[1].startswith("database: pgqueue 0.4 (extension)"), proc.stdout
    proc = run([pgq, "--version"], cwd=tmp_path, env={**env, "PGQUEUE_DSN": "host=127.0.0.1 port=1"})
    assert proc.returncode == 0 and "database: not connected" in proc.stdout and not proc.stderr

    # without the embedded extra, the demo says what to install in one line
    proc = run([pgq, "demo", "--messages", "10"], cwd=tmp_path, env=env, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "pgqueue-sql[embedded]" in proc.stderr
    # the wheel alone installs pgqueue into a database whose server has no pgqueue files needed:
    # the plain SQL it ships, run by the database's owner (a role that is not superuser)
    owner = f"pq_wheel_owner_{os.getpid()}"
    admin_execute(pg_server, f'CREATE ROLE "{owner}" LOGIN NOSUPERUSER')
    empty = create_database(pg_server, "template0", prefix="wheel")
    try:
        admin_execute(pg_server, f'ALTER DATABASE "{empty}" OWNER TO "{owner}"')
        target = pg_server.dsn(empty, user=owner)
        proc = run([pgq, "install", "--plain", "--dsn", target], cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        proc = run([pgq, "--version"], cwd=tmp_path, env={**env, "PGQUEUE_DSN": target})
        assert proc.returncode == 0 and "database: pgqueue 0.4 (plain" in proc.stdout, proc.stdout + proc.stderr
    finally:
        drop_database(pg_server, empty)
        admin_execute(pg_server, f'DROP ROLE IF EXISTS "{owner}"')
    # the benchmark suite is in the repository only
    proc = run([pgq, "bench", "--smoke"], cwd=tmp_path, env=env, timeout=60)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1 and "python -m bench" in proc.stderr


def test_a_build_from_a_clone_without_make_says_so(tmp_path: Path) -> None:
    """setup.py runs `make` in a clone: without make on the PATH it says that, not a traceback."""
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "python", clone / "python", symlinks=True,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "sql", "dist"))
    shutil.copytree(REPO / "extension", clone / "extension")
    shutil.copy(REPO / "Makefile", clone / "Makefile")
    bindir = tmp_path / "bin"  # a PATH with nothing on it (python is called by its full path)
    bindir.mkdir()
    proc = run([sys.executable, "-c",
                "import runpy, sys; sys.argv = ['setup.py', 'egg_info']; runpy.run_path('setup.py', run_name='__main__')"],
               cwd=clone / "python", env=clean_env(PATH=str(bindir)))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "`make` was not found on the PATH" in proc.stderr and "could not be generated" in proc.stderr, proc.stderr
    # and nothing else: it went on to say that PostgreSQL's server development files were
    # needed, which they are not (the line above says so, and the README)
    assert "server development files" not in proc.stderr and "PG_CONFIG" not in proc.stderr, proc.stderr
